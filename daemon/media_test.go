package daemon

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot"
	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// TestMediaFiles: a site's and a node's media are built once for their
// inputs (a second request gets the same file, untouched), a changed
// node gets a new one, and unknown sites, nodes and kinds are not found.
func TestMediaFiles(t *testing.T) {
	repo := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd"} {
		os.WriteFile(filepath.Join(repo, f), []byte(strings.Repeat(f, 1000)), 0o644)
	}
	root, err := os.OpenRoot(repo)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	tlsDir := t.TempDir()
	if err := trust.InitCA(tlsDir, trust.CAOptions{Hosts: []string{"198.18.0.1"}, Force: true}); err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(tlsDir, trust.CAFile))
	ca := string(caPEM)
	node := &plan.Node{Name: "n1", Site: "s1", Hash: "h1", Network: &plan.NodeNetwork{Address: "198.19.7.10/24"}}
	p := &plan.Plan{
		Sites:   []*plan.Site{{Name: "s1", Network: plan.Network{ServerAddress: "198.18.0.1", HTTPSPort: 8443}, Nodes: []*plan.Node{node}}},
		MicroOS: []*plan.MicroOS{{Name: "default", Hash: "m1", Kernel: plan.Artifact{Path: "vmlinuz"}, Initrd: plan.Artifact{Path: "initrd"}}},
	}
	live := &boot.Live{}
	live.Swap(p)
	m := &mediaFiles{dir: filepath.Join(t.TempDir(), "media"), ca: ca, artifacts: &bhttp.Artifacts{Repo: root}, plans: live}
	ctx := context.Background()
	site, err := m.get(ctx, "s1", "", "boot.efi")
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(site)
	again, err := m.get(ctx, "s1", "", "boot.efi")
	if st2, _ := os.Stat(again); err != nil || again != site || !st2.ModTime().Equal(st1.ModTime()) {
		t.Errorf("second request: %s, %v: built again", again, err)
	}
	n1, err := m.get(ctx, "s1", "n1", "boot.efi")
	if err != nil || n1 == site {
		t.Fatalf("node's medium: %s, %v", n1, err)
	}
	node.Hash = "h2" // a commit changed the node
	if n2, err := m.get(ctx, "s1", "n1", "boot.efi"); err != nil || n2 == n1 {
		t.Errorf("after the node changed: %s, %v (before %s)", n2, err, n1)
	}
	for _, c := range [][3]string{{"nope", "", "boot.efi"}, {"s1", "nope", "boot.efi"}, {"s1", "", "boot.exe"}} {
		if _, err := m.get(ctx, c[0], c[1], c[2]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v: %v, want not found", c, err)
		}
	}
	m.ca = ""
	if _, err := m.get(ctx, "s1", "n1", "media.iso"); err == nil || !strings.Contains(err.Error(), "site CA") {
		t.Errorf("no CA: %v", err)
	}
}
