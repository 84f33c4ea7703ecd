// Command microos writes the test Micro-OS initramfs: busybox and an init
// that prints the identity the kernel and firmware give it, then powers
// off. The real Micro-OS (with bootops-agent) is built by
// `bootops microos build` once the agent exists.
//
//	go run ./test/microos -o sites/microos/initrd.img
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bootops/bootops/test/microos/initramfs"
)

func main() {
	out := flag.String("o", "", "output file")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox (Debian: busybox-static)")
	flag.Parse()
	if *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := initramfs.Write(*out, *busybox); err != nil {
		fmt.Fprintln(os.Stderr, "microos:", err)
		os.Exit(1)
	}
}
