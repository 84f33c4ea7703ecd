package redfishvm

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"
)

// bootOverride is the system's BootSourceOverride settings.
type bootOverride struct {
	Target  string `json:"BootSourceOverrideTarget"`
	Enabled string `json:"BootSourceOverrideEnabled"`
	Mode    string `json:"BootSourceOverrideMode"`
}

// The values a PATCH may set, and the reset types the system takes.
var (
	bootTargets = []string{"None", "Pxe", "Hdd", "Cd"}
	bootEnabled = []string{"Once", "Continuous", "Disabled"}
	bootModes   = []string{"UEFI", "Legacy"}
	resetTypes  = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"}
)

// first is the target the next boot takes first, "" for the machine's
// own order (b.mu held).
func (b *BMC) first() string {
	if b.boot.Enabled == "Disabled" || b.boot.Target == "None" {
		return ""
	}
	return b.boot.Target
}

// booted is told that a boot took the override: Once is then Disabled
// (b.mu held).
func (b *BMC) booted() {
	if b.boot.Enabled == "Once" {
		b.boot.Enabled = "Disabled"
	}
}

func (b *BMC) system() map[string]any {
	power := "Off"
	if b.cfg.Machine.On() {
		power = "On"
	}
	b.mu.Lock()
	boot := b.boot
	b.mu.Unlock()
	return map[string]any{
		"@odata.type":  computerSystemType,
		"@odata.id":    systemPath,
		"Id":           "1",
		"Name":         "QEMU virtual machine",
		"SystemType":   "Physical",
		"Manufacturer": "QEMU",
		"Model":        "Standard PC",
		"UUID":         "8f0b6c1e-2d4a-4e7b-9c3f-1a5d7e9b0c24",
		"Status":       enabled(),
		"PowerState":   power,
		"Boot": map[string]any{
			"BootSourceOverrideEnabled":                        boot.Enabled,
			"BootSourceOverrideTarget":                         boot.Target,
			"BootSourceOverrideTarget@Redfish.AllowableValues": bootTargets,
			"BootSourceOverrideMode":                           boot.Mode,
		},
		"Links": map[string]any{"ManagedBy": []any{link(managerPath)}},
		"Actions": map[string]any{
			"#ComputerSystem.Reset": map[string]any{
				"target":                            resetPath,
				"ResetType@Redfish.AllowableValues": resetTypes,
			},
		},
	}
}

// patchBoot answers a PATCH of the system: its Boot override settings,
// each checked; other properties are read-only.
func (b *BMC) patchBoot(q *request) {
	var in struct {
		Boot map[string]any
	}
	if !q.decode(&in) {
		return
	}
	if in.Boot == nil {
		q.fail(http.StatusBadRequest, "PropertyNotWritable", "Only Boot can be changed")
		return
	}
	b.order.Lock()
	defer b.order.Unlock()
	b.mu.Lock()
	next := b.boot
	b.mu.Unlock()
	set := map[string]*string{"BootSourceOverrideTarget": &next.Target, "BootSourceOverrideEnabled": &next.Enabled, "BootSourceOverrideMode": &next.Mode}
	allowed := map[string][]string{"BootSourceOverrideTarget": bootTargets, "BootSourceOverrideEnabled": bootEnabled, "BootSourceOverrideMode": bootModes}
	var said []string
	for k, v := range in.Boot {
		dst, ok := set[k]
		if !ok {
			continue // what gofish sends back of the rest: left as it is
		}
		s, _ := v.(string)
		if !slices.Contains(allowed[k], s) {
			q.fail(http.StatusBadRequest, "PropertyValueNotInList", "The value %v for the property %s is not in the list of acceptable values %v.", v, k, allowed[k])
			return
		}
		*dst = s
		said = append(said, k+"="+s)
	}
	sort.Strings(said)
	q.say("%s", strings.Join(said, " "))
	b.mu.Lock()
	b.boot = next
	b.mu.Unlock()
	q.reply(http.StatusOK, b.system())
}

// errOff is a restart of a machine that is off.
var errOff = errors.New("the system is off")

// reset answers ComputerSystem.Reset: the order given to the machine,
// with the boot override for a boot it starts.
func (b *BMC) reset(q *request) {
	var in struct{ ResetType string }
	if !q.decode(&in) {
		return
	}
	q.say("%s", in.ResetType)
	if !slices.Contains(resetTypes, in.ResetType) {
		q.fail(http.StatusBadRequest, "ActionParameterValueNotInList", "The value %q for the parameter ResetType is not in the list of acceptable values %v.", in.ResetType, resetTypes)
		return
	}
	ctx, cancel := b.orderContext(q.r)
	defer cancel()
	b.order.Lock()
	defer b.order.Unlock()
	b.mu.Lock()
	first := b.first()
	b.mu.Unlock()
	if first != "" {
		q.say("(boot %s first)", first)
	}
	booted, err := b.power(ctx, in.ResetType, first)
	switch {
	case errors.Is(err, errOff):
		q.fail(http.StatusConflict, "ActionNotSupported", "The requested operation is not supported in the present power state: %v.", err)
		return
	case err != nil:
		q.fail(http.StatusInternalServerError, "InternalError", "%s: %v", in.ResetType, err)
		return
	}
	if booted {
		b.mu.Lock()
		b.booted()
		b.mu.Unlock()
	}
	q.done()
}

// power gives the machine the order of a reset type, and says whether
// it booted (and so took the override). b.order is held.
func (b *BMC) power(ctx context.Context, resetType, first string) (booted bool, err error) {
	m := b.cfg.Machine
	on := m.On()
	switch resetType {
	case "On":
		if on {
			return false, nil
		}
		return true, m.PowerOn(ctx, first)
	case "ForceOff":
		return false, m.PowerOff(ctx)
	case "GracefulShutdown":
		if !on {
			return false, nil
		}
		return false, m.Shutdown(ctx)
	case "ForceRestart":
		if !on {
			return false, errOff
		}
		return true, m.Reset(ctx, first)
	default: // PowerCycle: off, then on; a system that is off is turned on
		if on {
			if err := m.PowerOff(ctx); err != nil {
				return false, err
			}
		}
		return true, m.PowerOn(ctx, first)
	}
}
