// Package tftp serves the iPXE binaries over TFTP, read-only. The files are
// read once at start from the iPXE folder (Debian's ipxe package links
// ipxe.efi to /boot: the link is resolved here, deliberately) and served
// from memory by exact name, so no request path can reach the filesystem.
package tftp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pin/tftp/v3"

	"github.com/bootops/bootops/boot/status"
)

// Files are the binaries served, by name.
type Files map[string][]byte

// Names of the iPXE builds the DHCP server hands out.
var Names = []string{"undionly.kpxe", "ipxe.efi", "snp.efi", "snponly.efi", "ipxe.pxe", "undionly.kkpxe"}

// Load reads the known iPXE binaries from dir; missing ones are skipped,
// but at least one must be there.
func Load(dir string) (Files, error) {
	files := Files{}
	for _, name := range Names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tftp: %w", err)
		}
		files[name] = b
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("tftp: no iPXE binary in %s (install Debian's ipxe package, or point --ipxe-dir elsewhere)", dir)
	}
	return files, nil
}

// Lookup finds a file by the name a client asked for: a leading '/' is
// ignored, anything else must match exactly.
func (f Files) Lookup(name string) ([]byte, bool) {
	b, ok := f[strings.TrimPrefix(name, "/")]
	return b, ok
}

// List names the files, sorted.
func (f Files) List() []string {
	var out []string
	for n := range f {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Server is the TFTP server.
type Server struct {
	Files  Files
	Events status.Recorder
	Log    *slog.Logger
	// Timeout per packet before a resend (default 2 s: one lost packet
	// should not cost a boot storm 5 s).
	Timeout time.Duration
	// DrainTimeout bounds how long transfers in flight may finish once
	// the context ends (default 10 s).
	DrainTimeout time.Duration
}

// Serve answers on conn until ctx ends.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	read := func(name string, rf io.ReaderFrom) error {
		b, ok := s.Files.Lookup(name)
		if !ok {
			log.Info("tftp: not found", "file", name, "peer", peer(rf))
			if s.Events != nil {
				s.Events.Record(status.Event{Kind: status.KindTFTP, IP: peer(rf), Message: "tftp: no file " + quote(name), Error: true})
			}
			return fmt.Errorf("no such file")
		}
		// A bytes.Reader is an io.Seeker: the library answers tsize.
		_, err := rf.ReadFrom(bytes.NewReader(b))
		return err
	}
	srv := tftp.NewServer(read, nil) // no write handler: write requests are refused
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	srv.SetTimeout(timeout)
	srv.SetHook(hook{s: s, log: log})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(conn) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	drain := s.DrainTimeout
	if drain <= 0 {
		drain = 10 * time.Second
	}
	stopped := make(chan struct{})
	go func() {
		srv.Shutdown() // stops accepting, waits for transfers in flight
		<-done
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(drain):
		log.Warn("tftp: transfers still in flight at the drain deadline", "deadline", drain.String())
		conn.Close()
	}
	return nil
}

type hook struct {
	s   *Server
	log *slog.Logger
}

func (h hook) OnSuccess(st tftp.TransferStats) {
	h.log.Info("tftp", "file", st.Filename, "peer", st.RemoteAddr.String(), "duration", st.Duration.String())
	if h.s.Events != nil {
		h.s.Events.Record(status.Event{Kind: status.KindTFTP, IP: st.RemoteAddr.String(), Message: fmt.Sprintf("tftp: sent %s in %s", st.Filename, st.Duration.Round(time.Millisecond))})
	}
}

func (h hook) OnFailure(st tftp.TransferStats, err error) {
	h.log.Warn("tftp", "file", st.Filename, "peer", st.RemoteAddr.String(), "err", err)
	if h.s.Events != nil {
		h.s.Events.Record(status.Event{Kind: status.KindTFTP, IP: st.RemoteAddr.String(), Message: fmt.Sprintf("tftp: %s failed: %v", quote(st.Filename), err), Error: true})
	}
}

func peer(rf io.ReaderFrom) string {
	if t, ok := rf.(tftp.OutgoingTransfer); ok {
		a := t.RemoteAddr()
		return a.IP.String()
	}
	return ""
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80]
	}
	return fmt.Sprintf("%q", s)
}
