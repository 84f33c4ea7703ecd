package compiler

import (
	"bufio"
	"io"
	"strings"

	"filippo.io/age/armor"

	"github.com/bootops/bootops/plan"
)

// bmcField is a node's bmc field, or else its site's: the site's bmc gives
// its nodes' defaults (a protocol, a port, one credentials reference).
func (r *repo) bmcField(n *nodeObj, field string) (*value, *object) {
	if v := n.v.lookup("bmc", field); v != nil {
		return v, n.object
	}
	if s := r.sites[n.site]; s != nil {
		if v := s.v.lookup("bmc", field); v != nil {
			return v, s
		}
	}
	return nil, nil
}

// bmc is a node's BMC with its site's defaults merged in; nil without one.
// Only a node's own bmc gives it one: an address names one machine.
func (r *repo) bmc(n *nodeObj) *plan.BMC {
	if n.v.get("bmc") == nil {
		return nil
	}
	get := func(f string) *value { v, _ := r.bmcField(n, f); return v }
	b := &plan.BMC{
		Address:   get("address").String(),
		Protocol:  get("protocol").String(),
		Port:      get("port").integer(),
		TLSVerify: true,
	}
	if v := get("tlsVerify"); v != nil && v.kind == kBool {
		b.TLSVerify = v.b
	}
	if b.Protocol != plan.BMCRedfish {
		b.TLSVerify = false
	}
	if get("bootMode").String() == plan.BootLegacy {
		b.BootMode = plan.BootLegacy
	}
	if get("auth").String() == plan.AuthBasic && b.Protocol == plan.BMCRedfish {
		b.Auth = plan.AuthBasic
	}
	if get("boot").String() == plan.BootVirtualMedia {
		b.Boot = plan.BootVirtualMedia
	}
	if c := get("credentials"); c != nil {
		b.Secret = c.get("secret").String()
		b.Age = c.get("age").String()
	}
	return b
}

// checkBMCs: every node's BMC is whole (address, protocol, one
// credentials reference that reads), and no two nodes share one.
func (r *repo) checkBMCs() {
	seen := map[string]owner{}
	for _, n := range r.nodes {
		if n.v.get("bmc") == nil || n.site == "" {
			continue
		}
		where := " (in the node's bmc, or its site " + n.site + "'s bmc for every node)"
		b := r.bmc(n)
		pos := n.pos("bmc")
		if b.Address == "" {
			r.errorf(pos, "bmc.address", "missing: the BMC's IP address or host name")
		}
		if b.Protocol == "" {
			r.errorf(pos, "bmc.protocol", "missing: redfish or ipmi%s", where)
		}
		if v, o := r.bmcField(n, "tlsVerify"); v != nil && b.Protocol == plan.BMCIPMI {
			r.errorf(o.pos("bmc", "tlsVerify"), "bmc.tlsVerify", "only a Redfish BMC speaks TLS; IPMI has none to verify")
		}
		if v, o := r.bmcField(n, "boot"); v != nil && v.str == plan.BootVirtualMedia && b.Protocol != plan.BMCRedfish {
			r.errorf(o.pos("bmc", "boot"), "bmc.boot", "virtual-media needs a Redfish BMC (VirtualMedia); an IPMI one boots the node by network (pxe)")
		}
		if v, o := r.bmcField(n, "auth"); v != nil && b.Protocol == plan.BMCIPMI {
			r.errorf(o.pos("bmc", "auth"), "bmc.auth", "only a Redfish BMC has a choice of login (session or basic); IPMI logs in with RMCP+")
		}
		c, o := r.bmcField(n, "credentials")
		switch {
		case c == nil:
			r.errorf(pos, "bmc.credentials", "missing: secret (a file under the daemon's --secrets-dir) or age (\"username:password\" encrypted with age -a)%s", where)
		case b.Secret != "" && b.Age != "":
			r.errorf(o.pos("bmc", "credentials"), "bmc.credentials", "secret and age both set: give one")
		case b.Secret == "" && b.Age == "":
			r.errorf(o.pos("bmc", "credentials"), "bmc.credentials", "empty: give secret (a file under the daemon's --secrets-dir) or age")
		case b.Age != "":
			if err := checkAge(b.Age); err != "" {
				r.errorf(o.pos("bmc", "credentials", "age"), "bmc.credentials.age", "%s", err)
			}
		}
		if b.Address == "" {
			continue
		}
		key := strings.ToLower(b.Host())
		if b.Port == 0 {
			key += "|" + b.Protocol // the protocol's own port
		}
		if first, dup := seen[key]; dup {
			r.errorf(n.pos("bmc", "address"), "bmc.address", "%s is also node %s's BMC (at %s): one BMC powers one machine", b.Host(), first.name, first.pos)
			continue
		}
		seen[key] = owner{n.name, n.pos("bmc", "address")}
	}
}

// checkAge says what is wrong with an armoured age file, "" when nothing
// is: its armour decodes and it starts with age's header. Whether it
// decrypts is for the daemon, which alone holds the identity.
func checkAge(s string) string {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, armor.Header) {
		return "not an armoured age file: encrypt \"username:password\" with age -a -r <the daemon's recipient> and paste the whole block, from " + armor.Header
	}
	br := bufio.NewReader(armor.NewReader(strings.NewReader(s + "\n")))
	first, err := br.ReadString('\n')
	if err != nil && err != io.EOF {
		return "the age armour does not decode: " + err.Error()
	}
	if !strings.HasPrefix(first, "age-encryption.org/") {
		return "the armour holds no age file (it starts " + strings.TrimSpace(first) + ")"
	}
	return ""
}
