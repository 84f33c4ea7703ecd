package agent

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestFetchResumesAfterADroppedConnection(t *testing.T) {
	file := payload()
	const cut = 70_000
	s := &imageServer{file: file, take: dropAfter(cut, file)}
	srv := httptest.NewServer(s)
	defer srv.Close()
	var got bytes.Buffer
	var logs []string
	n, sum, err := Fetch(t.Context(), srv.Client(), srv.URL+"/os.img", &got, func(m string) { logs = append(logs, m) })
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(file)) || !bytes.Equal(got.Bytes(), file) {
		t.Errorf("fetched %d bytes, want the file's %d", n, len(file))
	}
	if sum != digest(file) {
		t.Errorf("sha256 %s, want %s", sum, digest(file))
	}
	want := []string{"|", fmt.Sprintf("bytes=%d-|\"v1\"", cut)}
	if !slices.Equal(s.ranges, want) {
		t.Errorf("requests (Range|If-Range) %q, want %q", s.ranges, want)
	}
	if !strings.Contains(strings.Join(logs, "\n"), fmt.Sprintf("connection lost at byte %d", cut)) {
		t.Errorf("log %q does not tell of the lost connection", logs)
	}
}

// A file changed between the cut and the resume is refused: the server
// answers the If-Range with the whole new file (200), which Fetch must not
// splice onto the old one's start.
func TestFetchRefusesAChangedFile(t *testing.T) {
	file := payload()
	const cut = 30_000
	drop := dropAfter(cut, file)
	s := &imageServer{file: file, take: func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			return drop(n, w, r)
		}
		w.Header().Set("ETag", `"v2"`)
		w.Write(file)
		return true
	}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	var got bytes.Buffer
	n, sum, err := Fetch(t.Context(), srv.Client(), srv.URL+"/os.img", &got, nil)
	if err == nil || !strings.Contains(err.Error(), "instead of 206 Partial Content") {
		t.Fatalf("Fetch: %v, want the resume refused", err)
	}
	if sum != "" || n != cut || got.Len() != cut {
		t.Errorf("got %d bytes (written %d) and sha256 %q, want the %d before the cut and no digest", n, got.Len(), sum, cut)
	}
}

func TestFetchFirstAnswerNotOK(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, _, err := Fetch(t.Context(), srv.Client(), srv.URL+"/missing", &bytes.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Fetch: %v, want the 404", err)
	}
}
