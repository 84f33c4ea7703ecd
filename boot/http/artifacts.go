package http

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// Artifacts finds the Micro-OS files: from the repository (a path), or
// from a URL into a content-addressed cache, verified against the sha256
// before the first byte is served. With Redirect, URL artifacts are not
// fetched: machines are sent to the URL itself (external storage).
type Artifacts struct {
	Repo     *os.Root // the repository checkout, for path artifacts
	CacheDir string   // for URL artifacts
	Client   *http.Client
	Redirect bool

	mu       sync.Mutex
	inflight map[string]*fetch
}

type fetch struct {
	done chan struct{}
	err  error
}

func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	name, file := r.PathValue("name"), r.PathValue("file")
	p := s.Plans.Current()
	var m *plan.MicroOS
	if p != nil {
		for _, x := range p.MicroOS {
			if x.Name == name {
				m = x
			}
		}
	}
	var a plan.Artifact
	switch {
	case m == nil:
		http.NotFound(w, r)
		return
	case file == "kernel":
		a = m.Kernel
	case file == "initrd":
		a = m.Initrd
	case file == "uki" && m.UKI != nil:
		a = *m.UKI
		w.Header().Set("Content-Type", "application/efi")
	default:
		http.NotFound(w, r)
		return
	}
	store := s.Files.Artifacts
	if store == nil {
		http.Error(w, "no artifact store", http.StatusServiceUnavailable)
		return
	}
	if a.URL != "" && store.Redirect {
		http.Redirect(w, r, a.URL, http.StatusFound)
		return
	}
	f, etag, err := store.open(r.Context(), a)
	if err != nil {
		s.logger().Warn("artifact", "microos", name, "file", file, "err", err)
		s.Events.Record(status.Event{Kind: status.KindFile, Message: fmt.Sprintf("micro-os %s %s: %v", name, file, err), Error: true, MAC: r.URL.Query().Get("mac")})
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("ETag", `"`+etag+`"`)
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	// ServeContent answers Range and If-None-Match; an *os.File goes out
	// through sendfile.
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// open returns the artifact's file and its ETag.
func (a *Artifacts) open(ctx context.Context, art plan.Artifact) (*os.File, string, error) {
	if art.Path != "" {
		if a.Repo == nil {
			return nil, "", errors.New("no repository to read " + art.Path + " from")
		}
		f, err := a.Repo.Open(filepath.FromSlash(art.Path))
		if err != nil {
			return nil, "", err
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, "", fmt.Errorf("%s: not a regular file", art.Path)
		}
		etag := art.SHA256
		if etag == "" {
			etag = fmt.Sprintf("%x-%x", st.Size(), st.ModTime().UnixNano())
		}
		return f, etag, nil
	}
	if art.URL == "" || len(art.SHA256) != 64 {
		return nil, "", errors.New("artifact has neither a path nor a URL with its sha256")
	}
	p := filepath.Join(a.CacheDir, art.SHA256)
	if f, err := os.Open(p); err == nil {
		return f, art.SHA256, nil
	}
	if err := a.fetch(ctx, art, p); err != nil {
		return nil, "", err
	}
	f, err := os.Open(p)
	return f, art.SHA256, err
}

// fetch downloads art into p once, however many machines ask at once.
func (a *Artifacts) fetch(ctx context.Context, art plan.Artifact, p string) error {
	a.mu.Lock()
	if a.inflight == nil {
		a.inflight = map[string]*fetch{}
	}
	if f := a.inflight[art.SHA256]; f != nil {
		a.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &fetch{done: make(chan struct{})}
	a.inflight[art.SHA256] = f
	a.mu.Unlock()
	f.err = a.download(art, p)
	close(f.done)
	a.mu.Lock()
	delete(a.inflight, art.SHA256)
	a.mu.Unlock()
	return f.err
}

func (a *Artifacts) download(art plan.Artifact, p string) error {
	if err := os.MkdirAll(a.CacheDir, 0o755); err != nil {
		return err
	}
	client := a.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Minute}
	}
	resp, err := client.Get(art.URL)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", art.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch %s: %s", art.URL, resp.Status)
	}
	tmp, err := os.CreateTemp(a.CacheDir, ".fetch-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), resp.Body); err != nil {
		tmp.Close()
		return fmt.Errorf("fetch %s: %w", art.URL, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, art.SHA256) {
		return fmt.Errorf("fetch %s: sha256 %s, the plan says %s: not served", art.URL, got, art.SHA256)
	}
	return os.Rename(tmp.Name(), p)
}

// File is where a Micro-OS file is on this machine: in the repository
// (checked against its sha256 when Git gives one), or in the cache,
// fetched from its URL and verified first. Boot media are built from it.
func (a *Artifacts) File(ctx context.Context, art plan.Artifact) (string, error) {
	f, _, err := a.open(ctx, art)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if art.Path != "" && art.SHA256 != "" {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return "", err
		}
		if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, art.SHA256) {
			return "", fmt.Errorf("%s: sha256 %s, Git says %s", art.Path, got, art.SHA256)
		}
	}
	if art.Path != "" {
		return filepath.Join(a.Repo.Name(), filepath.FromSlash(art.Path)), nil
	}
	return f.Name(), nil
}
