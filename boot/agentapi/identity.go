package agentapi

import (
	"fmt"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/plan"
)

// checkInIdentity is what an agent says it is, through the parsers a
// script request's identity goes through (boot.ParseUUID, …); an error
// (400) for any value that is not an identifier: a MAC, UUID or serial no
// firmware reports, a machine key that is not one the server hands out,
// too many NICs.
func checkInIdentity(c *plan.CheckIn) error {
	if boot.Word(c.Site, 63) != c.Site { // Word gives "" past 63 bytes
		return fmt.Errorf("site %.70q: not a site name", c.Site)
	}
	if boot.Word(c.Node, 63) != c.Node {
		return fmt.Errorf("node %.70q: not a node name", c.Node)
	}
	if c.Machine != "" && !boot.ValidMachineKey(c.Machine) {
		return fmt.Errorf("machine %.70q: not a machine key (mac:, uuid: or serial: and its value)", c.Machine)
	}
	if err := identifiers(&c.Identity); err != nil {
		return err
	}
	if len(c.Disks) > 256 {
		return fmt.Errorf("disks: %d, at most 256", len(c.Disks))
	}
	for i, d := range c.Disks {
		if boot.Clean(d.Name, 64) != d.Name {
			return fmt.Errorf("disks[%d].name %.70q: not a device name", i, d.Name)
		}
	}
	if len(c.Arch) > 32 || len(c.Agent) > 128 {
		return fmt.Errorf("arch or agent version too long")
	}
	switch c.Boot.Firmware {
	case "", "uefi", "bios":
	default:
		return fmt.Errorf("boot.firmware %.40q: want uefi or bios", c.Boot.Firmware)
	}
	switch c.Boot.Chain {
	case "", plan.ChainIPXE, plan.ChainShim, plan.ChainUKI, plan.ChainMedia:
	default:
		return fmt.Errorf("boot.chain %.40q: want %s, %s, %s or %s", c.Boot.Chain, plan.ChainIPXE, plan.ChainShim, plan.ChainUKI, plan.ChainMedia)
	}
	return nil
}

// identifiers checks a check-in's MACs, and keeps its UUID and serial as
// bootops keeps them (a firmware's placeholder dropped).
func identifiers(id *plan.Identity) error {
	if len(id.MACs) > 64 {
		return fmt.Errorf("identity: %d MACs, at most 64", len(id.MACs))
	}
	for i, m := range id.MACs {
		if plan.NormalizeMAC(m) == "" {
			return fmt.Errorf("identity.macs[%d] %.40q: not a MAC address", i, m)
		}
	}
	var ok bool
	uuid, serial := id.UUID, id.Serial
	if id.UUID, ok = boot.ParseUUID(uuid); !ok {
		return fmt.Errorf("identity.uuid %.40q: not a UUID", uuid)
	}
	if id.Serial, ok = boot.ParseSerial(serial); !ok {
		return fmt.Errorf("identity.serial %.70q: not a serial (printable ASCII without spaces, at most 64 bytes)", serial)
	}
	return nil
}
