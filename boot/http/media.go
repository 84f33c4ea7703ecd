package http

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"

	"github.com/bootops/bootops/boot/status"
)

// Boot media over HTTP: the UKI a firmware's HTTPS boot URL names, and the
// ISO and USB image a BMC's virtual media (or an operator) fetches. They
// hold nothing secret; they are built once per Plan and served with Range
// (BMCs read an ISO in pieces).

// mediaTypes are the files served and their Content-Type: UEFI HTTP boot
// decides what it fetched by it (an EFI program, or an ISO or disk image
// to mount as a RAM disk).
var mediaTypes = map[string]string{
	"boot.efi":  "application/efi",
	"media.iso": "application/vnd.efi-iso",
	"media.img": "application/vnd.efi-img",
}

// medium is GET /media/{site}/{file} and /media/{site}/nodes/{node}/{file}.
func (s *Server) medium(w http.ResponseWriter, r *http.Request) {
	file, site, node := r.PathValue("file"), r.PathValue("site"), r.PathValue("node")
	ctype, ok := mediaTypes[file]
	if !ok || s.Files.Media == nil {
		http.Error(w, "no such medium: want boot.efi, media.iso or media.img", http.StatusNotFound)
		return
	}
	p, err := s.Files.Media(r.Context(), site, node, file)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, fs.ErrNotExist) {
			code = http.StatusNotFound
		}
		if code != http.StatusNotFound {
			s.Events.Record(status.Event{Kind: status.KindFile, Site: site, Node: node, IP: clientIP(r), Message: fmt.Sprintf("medium %s: %v", file, err), Error: true})
		}
		http.Error(w, err.Error(), code)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if r.Header.Get("Range") == "" {
		what := "site " + site
		if node != "" {
			what = "node " + node
		}
		s.Events.Record(status.Event{Kind: status.KindFile, Site: site, Node: node, IP: clientIP(r), Message: "http: sent the " + file + " of " + what})
	}
	w.Header().Set("Content-Type", ctype)
	http.ServeContent(w, r, "", st.ModTime(), f)
}
