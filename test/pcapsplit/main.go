// Command pcapsplit writes the UDP payloads of a pcap (Ethernet, IPv4) as
// numbered files named after their destination port: 000-67.bin, …
//
//	go run ./test/pcapsplit capture.pcap OUTDIR
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/bootops/bootops/test/pcap"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: pcapsplit FILE.pcap OUTDIR")
		os.Exit(2)
	}
	if err := split(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "pcapsplit:", err)
		os.Exit(1)
	}
}

func split(in, out string) error {
	udp, err := pcap.ReadUDP(in)
	if err != nil {
		return err
	}
	for n, u := range udp {
		name := filepath.Join(out, fmt.Sprintf("%03d-%d.bin", n, u.DstPort))
		if err := os.WriteFile(name, u.Payload, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %d packets to %s\n", len(udp), out)
	return nil
}
