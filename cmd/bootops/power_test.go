package main

import (
	"strings"
	"testing"
)

// The operator token comes from --token-file or BOOTOPS_TOKEN; without
// one, on/off/cycle and boot-device stop before asking anyone.
func TestPowerNeedsTheOperatorToken(t *testing.T) {
	for _, args := range [][]string{{"power", "lab/n1", "on"}, {"boot-device", "lab/n1", "pxe"}} {
		code, _, errs := bootops(t, nil, args...)
		if code != 2 || !strings.Contains(errs, "need the daemon's operator token") {
			t.Errorf("%v without a token: %d %s", args, code, errs)
		}
	}
	// With BOOTOPS_TOKEN it goes on, to the daemon (none here).
	code, _, errs := bootops(t, map[string]string{"BOOTOPS_TOKEN": "t"}, "power", "lab/n1", "on", "--server", "http://127.0.0.1:1")
	if code != 1 || !strings.Contains(errs, "no answer from the daemon") {
		t.Errorf("with BOOTOPS_TOKEN: %d %s", code, errs)
	}
	if code, _, errs := bootops(t, nil, "power", "lab/n1", "reboot"); code != 2 || !strings.Contains(errs, `unknown action "reboot"`) {
		t.Errorf("bad action: %d %s", code, errs)
	}
}
