// Package initramfs builds the test Micro-OS: a gzipped newc cpio archive
// with a static busybox and an init script that prints
//
//	BOOTOPS-MICROOS node=<bootops.node> profile=<bootops.profile> serial=<SMBIOS serial> uuid=<SMBIOS UUID>
//
// on the console, which end-to-end tests and the demo read, then powers off.
package initramfs

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
)

// Marker starts the line the init prints.
const Marker = "BOOTOPS-MICROOS"

const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
node=$(/bin/busybox sed -n 's/.*bootops.node=\([^ ]*\).*/\1/p' /proc/cmdline)
profile=$(/bin/busybox sed -n 's/.*bootops.profile=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "` + Marker + ` node=${node:-none} profile=${profile:-none} serial=$(/bin/busybox cat /sys/class/dmi/id/product_serial) uuid=$(/bin/busybox cat /sys/class/dmi/id/product_uuid)"
/bin/busybox poweroff -f
`

// Write builds the initramfs at path from the static busybox at busybox.
func Write(path, busybox string) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("busybox (Debian package busybox-static): %w", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := cpio{w: zw}
	w.dir("bin")
	w.file("bin/busybox", bb, 0o755)
	w.file("init", []byte(initScript), 0o755)
	w.trailer()
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// cpio writes the newc format the kernel unpacks.
type cpio struct {
	w   interface{ Write([]byte) (int, error) }
	ino int
}

func (c *cpio) header(name string, mode uint32, size int) {
	c.ino++
	fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	c.w.Write(append([]byte(name), 0))
	c.pad(110 + len(name) + 1)
}

func (c *cpio) pad(n int) {
	if r := n % 4; r != 0 {
		c.w.Write(make([]byte, 4-r))
	}
}

func (c *cpio) dir(name string) { c.header(name, 0o040755, 0) }

func (c *cpio) file(name string, data []byte, perm uint32) {
	c.header(name, 0o100000|perm, len(data))
	c.w.Write(data)
	c.pad(len(data))
}

func (c *cpio) trailer() { c.header("TRAILER!!!", 0, 0) }
