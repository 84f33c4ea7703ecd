package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

var epoch = time.Unix(1700000000, 0)

func testConfig(created time.Time, data string) Config {
	return Config{
		Layers: []Layer{
			{Comment: "base", Files: []File{
				{Path: "/tmp", Dir: true, Mode: 0o1777},
				{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0::/root:/sbin/nologin\n")},
			}},
			{Comment: "app", Files: []File{
				{Path: "/usr/lib/app/agent", Mode: 0o755, Data: []byte("agent")},
				{Path: "/usr/bin/app", Mode: 0o755, Data: []byte(data)},
				{Path: "/var/lib/app", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
			}},
		},
		Created: created, User: "65532:65532", Entrypoint: []string{"/usr/bin/app"},
		Ports: []string{"8080/tcp"}, Volumes: []string{"/var/lib/app"}, Labels: map[string]string{"a": "b"},
	}
}

// The same files, listed in another order, give the same digest; another
// timestamp or other contents give another.
func TestBuildReproducible(t *testing.T) {
	digest := func(c Config) string {
		img, err := Build(c)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	a := digest(testConfig(epoch, "v1"))
	shuffled := testConfig(epoch.Add(300*time.Millisecond), "v1") // sub-second: dropped
	for _, l := range shuffled.Layers {
		for i, j := 0, len(l.Files)-1; i < j; i, j = i+1, j-1 {
			l.Files[i], l.Files[j] = l.Files[j], l.Files[i]
		}
	}
	if b := digest(shuffled); b != a {
		t.Errorf("same files in another order: digest %s, want %s", b, a)
	}
	if b := digest(testConfig(epoch.Add(time.Second), "v1")); b == a {
		t.Errorf("another timestamp: same digest %s", b)
	}
	if b := digest(testConfig(epoch, "v2")); b == a {
		t.Errorf("other contents: same digest %s", b)
	}
}

// A layer's entries are sorted, their parents added, every header fixed.
func TestTarHeaders(t *testing.T) {
	b, err := Tar([]File{
		{Path: "/usr/bin/app", Mode: 0o755, Data: []byte("x")},
		{Path: "/var/lib/app/", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
	}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" || len(h.PAXRecords) != 0 {
			t.Errorf("%s: mtime %v uname %q gname %q pax %v: want %v and nothing else", h.Name, h.ModTime, h.Uname, h.Gname, h.PAXRecords, epoch)
		}
		got = append(got, fmt.Sprintf("%s %c %o %d:%d", h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid))
	}
	want := []string{
		"usr/ 5 755 0:0", "usr/bin/ 5 755 0:0", "usr/bin/app 0 755 0:0",
		"var/ 5 755 0:0", "var/lib/ 5 755 0:0", "var/lib/app/ 5 700 65532:65532",
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTarRefuses(t *testing.T) {
	for name, files := range map[string][]File{
		"relative":      {{Path: "etc/passwd", Mode: 0o644, Data: []byte("x")}},
		"twice":         {{Path: "/a", Mode: 0o644, Data: []byte("x")}, {Path: "/a/", Mode: 0o644, Data: []byte("y")}},
		"no contents":   {{Path: "/a", Mode: 0o644}},
		"file as a dir": {{Path: "/a", Mode: 0o644, Data: []byte("x")}, {Path: "/a/b", Mode: 0o644, Data: []byte("y")}},
	} {
		if _, err := Tar(files, epoch); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
