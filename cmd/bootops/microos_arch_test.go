package main

import (
	"strings"
	"testing"

	"github.com/bootops/bootops/microos"
)

// The MicroOS object microos build prints says the family it was built
// for: an arm64 one its arch and the PL011 console, named arm64; the x86
// one as before.
func TestPrintedMicroOSSaysItsArch(t *testing.T) {
	r := microos.Result{Kernel: "out/vmlinuz", Initrd: "out/initrd.img", KernelSHA256: "aa", InitrdSHA256: "bb"}
	var arm, x86 strings.Builder
	printMicroOS(&arm, r, t.TempDir(), microos.ArchARM64)
	printMicroOS(&x86, r, t.TempDir(), microos.ArchX86_64)
	for _, want := range []string{"(e.g. microos/arm64.yaml)", "name: arm64\narch: arm64\nkernel:", "cmdline: console=tty0 console=ttyAMA0,115200\n"} {
		if !strings.Contains(arm.String(), want) {
			t.Errorf("the arm64 object lacks %q:\n%s", want, arm.String())
		}
	}
	if s := x86.String(); strings.Contains(s, "arch:") || !strings.Contains(s, "name: default\nkernel:") || !strings.Contains(s, "console=ttyS0,115200") {
		t.Errorf("the x86_64 object:\n%s", s)
	}
}
