// Command pcapsplit writes the UDP payloads of a pcap (Ethernet, IPv4) as
// numbered files named after their destination port: 000-67.bin, …
//
//	go run ./test/pcapsplit capture.pcap OUTDIR
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var hdr [24]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return err
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if binary.BigEndian.Uint32(hdr[:4]) == 0xa1b2c3d4 {
		bo = binary.BigEndian
	}
	if bo.Uint32(hdr[20:24]) != 1 {
		return fmt.Errorf("not an Ethernet capture")
	}
	n := 0
	for {
		var rec [16]byte
		if _, err := io.ReadFull(f, rec[:]); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		pkt := make([]byte, bo.Uint32(rec[8:12]))
		if _, err := io.ReadFull(f, pkt); err != nil {
			return err
		}
		if len(pkt) < 14+20+8 || binary.BigEndian.Uint16(pkt[12:14]) != 0x0800 {
			continue
		}
		ip := pkt[14:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[9] != 17 || len(ip) < ihl+8 {
			continue
		}
		udp := ip[ihl:]
		port := binary.BigEndian.Uint16(udp[2:4])
		name := filepath.Join(out, fmt.Sprintf("%03d-%d.bin", n, port))
		if err := os.WriteFile(name, udp[8:], 0o644); err != nil {
			return err
		}
		n++
	}
	fmt.Printf("wrote %d packets to %s\n", n, out)
	return nil
}
