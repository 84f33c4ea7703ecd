// Command redfishvmd runs the Redfish test BMC of package redfishvm in
// front of one QEMU VM, for tests that need it in a network namespace of
// their own (ip netns exec … redfishvmd -addr 198.18.0.5:8443 -- QEMU
// ARGS). It prints "serving" once it listens, then each order the BMC
// carries out, as it does it; SIGTERM powers the VM off and ends it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/bootops/bootops/test/redfishvm"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "where the BMC listens (TLS, a certificate of its own)")
	dir := flag.String("dir", "", "a folder for the downloaded images and QEMU's QMP socket (required)")
	console := flag.String("console", "", "a file for the VM's serial console (QEMU's standard output)")
	hdd := flag.String("hdd", "", "the -device id= the boot target Hdd puts first")
	pxe := flag.String("pxe", "", "the -device id= the boot target Pxe puts first")
	qemu := flag.String("qemu", "qemu-system-x86_64", "the QEMU to run: a wrapper may start what the VM needs beside it at each power-on (a TPM), then exec QEMU")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: redfishvmd -addr HOST:PORT -dir DIR [-console FILE] [-hdd ID] [-pxe ID] [-qemu PATH] -- QEMU-ARGS…")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *dir == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	vm := redfishvm.VM{Binary: *qemu, Args: flag.Args(), Dir: *dir, BootDevices: map[string]string{}}
	if *hdd != "" {
		vm.BootDevices["Hdd"] = *hdd
	}
	if *pxe != "" {
		vm.BootDevices["Pxe"] = *pxe
	}
	if *console != "" {
		f, err := os.OpenFile(*console, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		vm.Output = f
	}
	machine := redfishvm.NewQEMU(vm)
	bmc := redfishvm.New(redfishvm.Config{Machine: machine, MediaDir: *dir, OrderTimeout: 3 * time.Minute, DownloadTimeout: 3 * time.Minute})
	srv, err := bmc.Start(*addr)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	fmt.Println("serving on", *addr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	shown := 0
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			off, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			machine.PowerOff(off)
			cancel()
			return
		case <-tick.C:
			saw := bmc.Saw("")
			for _, s := range saw[shown:] {
				if !strings.HasPrefix(s, "GET ") {
					fmt.Println(s)
				}
			}
			shown = len(saw)
		}
	}
}
