package http

import (
	"errors"
	"strings"
	"testing"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The overlay is served as the bytes built for the Plan, over HTTP and
// TFTP; without them, 503 with the reason.
func TestOverlayServed(t *testing.T) {
	s, _, _ := newServer(t, testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32)))
	h := s.Handler()
	if rec := get(t, h, "/artifacts/overlay/lab"); rec.StatusCode != 503 {
		t.Errorf("no overlays: %d, want 503", rec.StatusCode)
	}
	built := map[string][]byte{"lab": []byte("070701 the lab overlay")}
	s.Files.Overlay = func(site string) ([]byte, error) {
		if b, ok := built[site]; ok {
			return b, nil
		}
		return nil, errors.New("no overlay key: run 'bootops ca init'")
	}
	if got := body(t, get(t, h, "/artifacts/overlay/lab")); got != string(built["lab"]) {
		t.Errorf("served %q", got)
	}
	if rec := get(t, h, "/artifacts/overlay/other"); rec.StatusCode != 503 || !strings.Contains(body(t, rec), "ca init") {
		t.Errorf("no overlay: %d, want 503 with the reason", rec.StatusCode)
	}
	if b, ok := s.TFTPFile("/artifacts/overlay/lab", "198.18.0.100"); !ok || string(b) != string(built["lab"]) {
		t.Error("the overlay is not served over TFTP")
	}
}

// GRUB's dispatcher asks for the machine's config with its MAC, SMBIOS
// serial and UUID; the config is the node's, with a fresh token on a
// plain-HTTP site; a machine whose Micro-OS has no GRUB config is told so.
func TestGRUBOverTFTP(t *testing.T) {
	p := testPlan("http://198.18.0.1/i", strings.Repeat("ab", 32))
	p.Sites[0].Nodes[0].Artifacts.GRUB = "linux (tftp,198.18.0.1)/artifacts/microos/default/kernel 'bootops.node=a' 'bootops.token=" + plan.TokenPlaceholder + "'\nboot\n"
	s, mem, _ := newServer(t, p)
	d, ok := s.TFTPFile("/grub/grub.cfg", "198.18.0.100")
	if !ok || !strings.Contains(string(d), "smbios --type 1 --get-string 7") || !strings.Contains(string(d), "configfile \"(tftp)/grub/machine?mac=${net_default_mac}") {
		t.Fatalf("dispatcher:\n%s", d)
	}
	cfg, ok := s.TFTPFile("/grub/machine?mac=52:54:00:00:00:0a&serial=SER-A&uuid=", "198.18.0.100")
	if !ok || !strings.Contains(string(cfg), "'bootops.node=a'") || strings.Contains(string(cfg), plan.TokenPlaceholder) || tokenIn(string(cfg)) == "" {
		t.Errorf("node a's GRUB config:\n%s", cfg)
	}
	cfg, _ = s.TFTPFile("/grub/machine?mac=52:54:00:00:00:0b&serial=&uuid=", "198.18.0.101")
	if !strings.Contains(string(cfg), "has no GRUB script") || !strings.Contains(string(cfg), "halt") {
		t.Errorf("node b (an iPXE Micro-OS):\n%s", cfg)
	}
	// A provisioned machine: its disk's loader chainloaded (EDK2 takes a
	// GRUB exit for a success and opens its menu), exit only without one.
	local := grubFlavor.local("node a is provisioned (generation 0): booting from its disk")
	for _, want := range []string{"echo 'bootops: node a is provisioned", `search --no-floppy --file --set=bootops_disk "$bootops_loader"`,
		`set root="$bootops_disk"`, `chainloader "$bootops_loader"`, "/EFI/BOOT/BOOTAA64.EFI", "/EFI/BOOT/BOOTX64.EFI"} {
		if !strings.Contains(local, want) {
			t.Errorf("the local-disk GRUB script lacks %q:\n%s", want, local)
		}
	}
	if i, j := strings.Index(local, "set root="), strings.Index(local, "chainloader"); i < 0 || j < i {
		t.Errorf("the local-disk GRUB script chainloads before it sets root to the disk (GRUB gives the image root's device):\n%s", local)
	}
	if i, j := strings.Index(local, "chainloader"), strings.LastIndex(local, "\nexit\n"); j < i {
		t.Errorf("the local-disk GRUB script exits before it chainloads the disk:\n%s", local)
	}
	if k, ok := s.TFTPFile("artifacts/microos/default/kernel", "198.18.0.100"); !ok || string(k) != "0123456789abcdef" {
		t.Errorf("kernel over TFTP: %q %v", k, ok)
	}
	if _, ok := s.TFTPFile("artifacts/microos/default/../../etc/passwd", "198.18.0.100"); ok {
		t.Error("a path out of the artifacts was served")
	}
	var script status.Event
	for _, e := range mem.Events("lab/a") {
		if e.Kind == status.KindScript {
			script = e
		}
	}
	if !strings.Contains(script.Message, "GRUB script") || script.State != status.StateBooting {
		t.Errorf("node a's script event: %+v", script)
	}
}
