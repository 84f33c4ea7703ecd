package tftp

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pin/tftp/v3"

	"github.com/bootops/bootops/boot/status"
)

func TestServeOnLoopback(t *testing.T) {
	dir := t.TempDir()
	efi := make([]byte, 850_000) // the size of Debian's ipxe.efi
	rand.Read(efi)
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "ipxe.efi"), efi, 0o644)
	// Debian's ipxe.efi is a symlink out of the folder: it is read anyway.
	os.Symlink(filepath.Join(other, "ipxe.efi"), filepath.Join(dir, "ipxe.efi"))
	os.WriteFile(filepath.Join(dir, "undionly.kpxe"), []byte("bios build"), 0o644)
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("not served"), 0o644)
	files, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(files.List(), ",") != "ipxe.efi,undionly.kpxe" {
		t.Fatalf("loaded %v", files.List())
	}
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mem := &status.Memory{}
	s := &Server{Files: files, Events: mem}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()

	c, err := tftp.NewClient(conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetBlockSize(1468)
	c.RequestTSize(true)
	for _, name := range []string{"ipxe.efi", "/ipxe.efi"} {
		wt, err := c.Receive(name, "octet")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n, ok := wt.(tftp.IncomingTransfer).Size(); !ok || n != int64(len(efi)) {
			t.Errorf("tsize %d %v", n, ok)
		}
		var got bytes.Buffer
		if _, err := wt.WriteTo(&got); err != nil || !bytes.Equal(got.Bytes(), efi) {
			t.Fatalf("%s: %v, %d bytes, identical=%v", name, err, got.Len(), bytes.Equal(got.Bytes(), efi))
		}
	}
	for _, bad := range []string{"secret.txt", "../" + filepath.Base(other) + "/ipxe.efi", "/etc/passwd"} {
		if _, err := c.Receive(bad, "octet"); err == nil {
			t.Errorf("%q was served", bad)
		}
	}
	rf, err := c.Send("ipxe.efi", "octet")
	if err == nil {
		_, err = rf.ReadFrom(bytes.NewReader([]byte("overwrite")))
	}
	if err == nil {
		t.Error("a write request was accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	ev := mem.Events("ip:127.0.0.1")
	var ok, failed int
	for _, e := range ev {
		if e.Error {
			failed++
		} else {
			ok++
		}
	}
	if ok != 2 || failed < 4 {
		t.Errorf("events: %d ok, %d failed: %+v", ok, failed, ev)
	}
}
