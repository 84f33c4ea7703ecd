// Package ipmisim readies OpenIPMI's BMC simulator (ipmi_sim, Debian
// package openipmi) for the tests: one BMC on an address and port, user
// admin with password secret, and a chassis_control program when given.
package ipmisim

import (
	"fmt"
	"os"
	"path/filepath"
)

// Prepare writes the simulator's configuration for BMC name into dir and
// returns ipmi_sim's arguments. control, when set, is the program the BMC
// runs for chassis power and boot device (ipmi_sim's chassis_control).
func Prepare(dir, name, addr string, port int, control string) ([]string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("name %q\nset_working_mc 0x20\n  startlan 1\n    addr %s %d\n    priv_limit admin\n"+
		"    allowed_auths_admin none md2 md5 straight\n    guid a123456789abcdefa123456789abcd%02x\n  endlan\n", name, addr, port, port%256)
	if control != "" {
		conf += fmt.Sprintf("  chassis_control \"%s 0x20\"\n", control)
	}
	conf += "  user 2 true \"admin\" \"secret\" admin 10 none md2 md5 straight\n"
	lan, emu := filepath.Join(dir, "lan.conf"), filepath.Join(dir, "bmc.emu")
	if err := os.WriteFile(lan, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(emu, []byte("mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\nmc_enable 0x20\n"), 0o644); err != nil {
		return nil, err
	}
	return []string{"-c", lan, "-f", emu, "-s", filepath.Join(dir, "state"), "-n"}, nil
}
