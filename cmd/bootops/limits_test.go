package main

import (
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
)

// The LAN limits are serve flags, checked, and in --help.
func TestServeLimitFlags(t *testing.T) {
	for _, args := range [][]string{{"--unknown-max", "0"}, {"--new-machines-every", "0s"}, {"--max-conns-per-source", "0"}} {
		code, _, errs := bootops(t, nil, append([]string{"serve", "--source", t.TempDir()}, args...)...)
		if code != 2 || !strings.Contains(errs, args[0]) {
			t.Errorf("serve %v: %d %s", args, code, errs)
		}
	}
	code, out, _ := bootops(t, nil, "serve", "--help")
	for _, flag := range []string{"-max-conns", "-max-conns-per-source", "-new-machines-burst", "-new-machines-every", "-unknown-max", "-unknown-max-mb", "-node-grace", "-node-events-burst"} {
		if code != 0 || !strings.Contains(out, flag+" ") {
			t.Errorf("serve --help lacks %s", flag)
		}
	}
}

// What a machine sent cannot drive the operator's terminal, even from a
// server that did not escape it when it stored it.
func TestPrintedEventsEscaped(t *testing.T) {
	var b strings.Builder
	printEvent(&b, status.Event{Kind: "agent", State: "failed\x1b[8m", Message: "hidden\x1b]0;title\x07 \u009b2J\nforged line"})
	if out := b.String(); strings.ContainsAny(out, "\x1b\x07\u009b") || strings.Count(out, "\n") != 1 || !strings.Contains(out, `hidden\x1b]0;title\x07 \u009b2J\nforged line`) {
		t.Errorf("printed %q", out)
	}
	b.Reset()
	printUnknown(&b, []status.Machine{{Key: "serial:S\x1b[2J", State: "held", Serial: "S\x1b[2J", Last: status.Event{Message: "x\x1b[31m"}}})
	if strings.Contains(b.String(), "\x1b") {
		t.Errorf("status --unknown printed %q", b.String())
	}
}
