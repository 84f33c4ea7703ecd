package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/bootops/bootops/plan"
)

func explainCmd() *command {
	c := &command{
		name:    "explain",
		summary: "Say which node and profile a machine presenting these identifiers gets, and why (or why it is refused).",
		usage:   "[DIR] [--site SITE] [--mac MAC] [--uuid UUID] [--serial SERIAL] [-o text|json]",
		example: "  bootops explain examples/warehouse --serial SN-A0001 --mac 52:54:00:00:01:01\n" +
			"  # exit 0: the machine boots (a node, or the site's default) · 1: refused or invalid repo · 2: usage",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		site := fs.String("site", "", "site whose network the machine boots on (needed when the repo has several)")
		mac := fs.String("mac", "", "MAC address of the booting NIC")
		uuid := fs.String("uuid", "", "SMBIOS system UUID")
		serial := fs.String("serial", "", "SMBIOS system serial number")
		format := fs.String("o", "text", "output format: text or json")
		dir, err := parseDir(fs, e, args)
		if err != nil {
			return err
		}
		if *mac == "" && *uuid == "" && *serial == "" {
			return usagef("give at least one of --mac, --uuid, --serial")
		}
		if *mac != "" && plan.NormalizeMAC(*mac) == "" {
			return usagef("--mac %q is not a MAC address", *mac)
		}
		if *uuid != "" && plan.NormalizeUUID(*uuid) == "" {
			return usagef("--uuid %q is not a UUID", *uuid)
		}
		if *format != "text" && *format != "json" {
			return usagef("-o %q: want text or json", *format)
		}
		p, err := compileDir(e, dir)
		if err != nil {
			return err
		}
		if *site != "" && p.Site(*site) == nil {
			var names []string
			for _, s := range p.Sites {
				names = append(names, s.Name)
			}
			return usagef("no site %q (sites: %v)", *site, names)
		}
		d := p.Decide(*site, plan.Machine{MAC: *mac, UUID: *uuid, Serial: *serial})
		if *format == "json" {
			out := struct {
				plan.Decision
				Site  string `json:"site,omitempty"`
				Node  string `json:"node,omitempty"`
				Boots bool   `json:"boots"`
				// Encryption is the profile's, when the machine installs one.
				Encryption *plan.Encryption `json:"encryption,omitempty"`
				// Hold is where Git holds the node (install: hold).
				Hold string `json:"hold,omitempty"`
			}{Decision: d, Boots: d.Boots()}
			if pr := p.Profile(d.Profile); pr != nil && d.Boots() {
				out.Encryption = pr.Encryption
			}
			if d.Site != nil {
				out.Site = d.Site.Name
			}
			if d.Node != nil {
				out.Node, out.Hold = d.Node.Name, d.Node.Hold
			}
			b, _ := json.MarshalIndent(out, "", "  ")
			fmt.Fprintf(e.stdout, "%s\n", b)
		} else {
			printDecision(e, p, d)
		}
		if !d.Boots() {
			return errSilent
		}
		return nil
	}
	return c
}

func printDecision(e *env, p *plan.Plan, d plan.Decision) {
	w := e.stdout
	switch d.Outcome {
	case plan.Match:
		pr := p.Profile(d.Profile)
		fmt.Fprintf(w, "match: node %s (site %s) installs profile %s with micro-os %s\n", d.Node.Name, d.Node.Site, d.Profile, pr.MicroOS)
		printProof(w, p, d.Node, pr.MicroOS)
		if r := d.Node.Retire; r != nil {
			keep := ""
			if len(r.Keep) > 0 {
				keep = ", keeping disks " + strings.Join(r.Keep, ", ")
			}
			fmt.Fprintf(w, "  retire: erase %s%s: it boots the micro-os, erases and verifies its disks, powers off; never installed while Git retires it\n", r.Erase, keep)
		}
		if d.Node.Hold != "" {
			fmt.Fprintf(w, "  install: hold (%s): it boots the micro-os, checks in, shows its inventory and waits until a commit says install: auto\n", d.Node.Hold)
		}
		printEncryption(w, pr)
		printAddresses(w, d.Site, d.Node)
	case plan.Mismatch:
		fmt.Fprintf(w, "mismatch: refused; the machine gets a script that prints the reason and stops\n")
		for _, c := range d.Conflicts {
			if c.Registered == c.Presented {
				fmt.Fprintf(w, "  %s %s belongs to node %s/%s (%s)\n", c.Field, c.Presented, c.Site, c.Node, c.Source)
				continue
			}
			fmt.Fprintf(w, "  %s: presented %s, node %s/%s (%s) has %s\n", c.Field, c.Presented, c.Site, c.Node, c.Source, c.Registered)
		}
	case plan.Unknown:
		switch {
		case d.Site == nil || d.Policy == plan.PolicyIgnore:
			fmt.Fprintf(w, "unknown: not answered (policy ignore)\n")
		case d.Policy == plan.PolicyProvision:
			fmt.Fprintf(w, "unknown: installs site %s's default profile %s\n", d.Site.Name, d.Profile)
			printEncryption(w, p.Profile(d.Profile))
			printAddresses(w, d.Site, nil)
		case d.Policy == plan.PolicyHold:
			fmt.Fprintf(w, "unknown: held in the micro-os on site %s until a Node is committed\n", d.Site.Name)
			printAddresses(w, d.Site, nil)
		}
	}
	fmt.Fprintf(w, "why: %s\n", d.Reason)
}

// printProof says what node n's check-in must prove: its TPM, and how it
// booted.
func printProof(w io.Writer, p *plan.Plan, n *plan.Node, microOS string) {
	if tpm := n.Identity.TPM; tpm != nil {
		fmt.Fprintf(w, "  tpm: ek %s: served only to the machine holding this TPM\n", tpm.EK)
	}
	if a := n.Attestation; a != nil && a.Require {
		fmt.Fprintf(w, "  attestation: required: secure boot on, PCR 4 shows micro-os %s (PE digest %s)\n", microOS, p.MicroOSNamed(microOS).PEDigest)
	}
}

// printEncryption says how profile pr's image is encrypted, if it is:
// the partition, what the key is sealed to, who can recover it.
func printEncryption(w io.Writer, pr *plan.Profile) {
	e := pr.Encryption
	if e == nil {
		return
	}
	fmt.Fprintf(w, "  encryption: partition %d in LUKS2, unlocked by %s with the TPM, sealed to PCRs %s on the first boot\n", e.Partition, e.Unlock, pcrList(e.PCRs))
	fmt.Fprintf(w, "  recovery: its key encrypted with age to %s: %s\n", count(len(e.Recipients), "recipient"), shortRecipients(e.Recipients))
}

// describeEncryption is a profile's encryption on a few words, for a
// diff: "LUKS2 partition 2, TPM PCRs 7, 2 recovery recipients"; "off"
// for none.
func describeEncryption(e *plan.Encryption) string {
	if e == nil {
		return "off"
	}
	return fmt.Sprintf("LUKS2 partition %d, TPM PCRs %s, %s", e.Partition, pcrList(e.PCRs), count(len(e.Recipients), "recovery recipient"))
}

// pcrList is PCR numbers as systemd-cryptenroll writes them ("4+7").
func pcrList(pcrs []int) string {
	s := make([]string, len(pcrs))
	for i, n := range pcrs {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, "+")
}

// shortRecipients is age recipients in short, joined by commas.
func shortRecipients(rs []string) string {
	short := make([]string, len(rs))
	for i, r := range rs {
		short[i] = shortRecipient(r)
	}
	return strings.Join(short, ", ")
}

// shortRecipient is an age recipient as a person compares it with the
// one they hold: its start and its end (age1nln4ej…8hddt).
func shortRecipient(r string) string {
	if len(r) <= 16 {
		return r
	}
	return r[:10] + "…" + r[len(r)-5:]
}

// printAddresses says where a machine's addresses come from on site s (n
// is nil for an unknown machine) and the boot server's URL in each
// family: only for sites with IPv6 or a node with a reserved address, so
// the common IPv4 proxy site's answer stays two lines.
func printAddresses(w io.Writer, s *plan.Site, n *plan.Node) {
	nw := s.Network
	var ip, ipv6 string
	if n != nil {
		ip, ipv6 = n.IP, n.IPv6
	}
	if nw.IPv6 == nil && ip == "" {
		return
	}
	if nw.ServerAddress != "" {
		fmt.Fprintf(w, "  ipv4: %s; boot server %s\n", addressSource(nw.DHCP, nw.Pool, ip, "DHCP", "the site's DHCP server"), s.ServerURL())
	}
	if v6 := nw.IPv6; v6 != nil {
		fmt.Fprintf(w, "  ipv6: %s; boot server %s\n", addressSource(v6.DHCP, v6.Pool, ipv6, "DHCPv6", "SLAAC or the site's DHCPv6 server"), s.ServerURLv6())
	}
}

// addressSource says where a machine gets its address of one family: its
// reservation, else the site's pool or its own servers (own), by the
// site's DHCP mode in the family.
func addressSource(mode string, pool *plan.Pool, reserved, dhcp, own string) string {
	switch {
	case reserved != "":
		return reserved + " (" + dhcp + " reservation)"
	case mode == plan.DHCPReservation && pool != nil:
		return "an address from the pool " + pool.Start + "-" + pool.End + " (" + dhcp + " reservation mode)"
	case mode == plan.DHCPReservation:
		return "no address: the site has no pool (" + dhcp + " reservation mode)"
	case mode == plan.DHCPProxy:
		return "an address from " + own + " (" + dhcp + " proxy: bootops adds the boot options)"
	}
	return "an address from " + own + " (" + dhcp + " off)"
}
