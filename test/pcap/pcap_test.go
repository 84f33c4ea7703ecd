package pcap

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// A capture of an IPv4 UDP datagram, an ARP frame and a record cut short:
// the datagram, with its source and ports; the rest skipped or ending it.
func TestReadUDP(t *testing.T) {
	le := binary.LittleEndian
	file := make([]byte, 24)
	le.PutUint32(file[0:], 0xa1b2c3d4)
	le.PutUint32(file[20:], 1) // Ethernet
	record := func(sec uint32, frame []byte) {
		rec := make([]byte, 16)
		le.PutUint32(rec[0:], sec)
		le.PutUint32(rec[8:], uint32(len(frame)))
		le.PutUint32(rec[12:], uint32(len(frame)))
		file = append(append(file, rec...), frame...)
	}
	udp := []byte{0, 67, 0, 68, 0, 12, 0, 0, 'h', 'i', '!', '!'}
	ip := append([]byte{0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 255, 255, 255, 255}, udp...)
	eth := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0, 0, 1, 0x08, 0x00}, ip...)
	record(1700000000, eth)
	record(1700000001, append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0, 0, 1, 0x08, 0x06}, make([]byte, 28)...))
	file = append(file, 1, 2, 3) // cut short
	p := filepath.Join(t.TempDir(), "c.pcap")
	os.WriteFile(p, file, 0o644)
	got, err := ReadUDP(p)
	if err != nil || len(got) != 1 {
		t.Fatalf("%d datagrams, %v", len(got), err)
	}
	if u := got[0]; u.Src.String() != "52:54:00:00:00:01" || u.SrcPort != 67 || u.DstPort != 68 || string(u.Payload) != "hi!!" || u.At.Unix() != 1700000000 {
		t.Errorf("%+v", u)
	}
}
