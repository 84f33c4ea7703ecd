package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// power ends the Micro-OS: the disks are synced first. kexec into the
// installed kernel is not done here yet: it reboots instead.
func power(action string) error {
	unix.Sync()
	switch action {
	case "poweroff":
		return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	case "reboot", "kexec":
		return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	}
	return fmt.Errorf("unknown power action %q", action)
}
