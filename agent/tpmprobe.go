package agent

import (
	"fmt"
	"os"
	"path/filepath"
)

// tpmPresence says in one line whether the machine shows a TPM to the
// Micro-OS: the kernel's resource manager (dev/tpmrm0 beside sysfs) and
// the firmware's event log in securityfs, which an attested check-in
// needs. "none" when there is no TPM device.
func tpmPresence(sysfs string) string {
	dev := filepath.Join(filepath.Dir(sysfs), "dev/tpmrm0")
	if _, err := os.Stat(dev); err != nil {
		return "none"
	}
	// securityfs reports size 0: the log is only known by reading it.
	log, err := os.ReadFile(filepath.Join(sysfs, "kernel/security/tpm0/binary_bios_measurements"))
	switch {
	case err != nil:
		return fmt.Sprintf("/dev/tpmrm0, no event log (%v)", err)
	case len(log) == 0:
		return "/dev/tpmrm0, event log empty"
	}
	return fmt.Sprintf("/dev/tpmrm0, event log %d bytes", len(log))
}
