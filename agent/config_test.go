package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// root writes a Micro-OS's /etc/bootops: the built-in settings and, when
// doc is set, an overlay with its signature.
func root(t *testing.T, built trust.Config, doc, sig []byte) string {
	t.Helper()
	r := t.TempDir()
	os.MkdirAll(filepath.Join(r, "etc/bootops"), 0o755)
	b, _ := json.Marshal(built)
	os.WriteFile(filepath.Join(r, trust.ConfigPath), b, 0o644)
	if doc != nil {
		os.WriteFile(filepath.Join(r, trust.OverlayPath), doc, 0o644)
	}
	if sig != nil {
		os.WriteFile(filepath.Join(r, trust.OverlaySigPath), sig, 0o644)
	}
	return r
}

func TestLoadOverlay(t *testing.T) {
	dir := t.TempDir()
	if err := trust.InitCA(dir, trust.CAOptions{Hosts: []string{"198.18.0.1"}}); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, trust.CAFile))
	pub, priv, _ := ed25519.GenerateKey(nil)
	built := trust.Config{OverlayKeys: []string{base64.StdEncoding.EncodeToString(pub)}}
	doc, sig, _ := trust.SignOverlay(priv, trust.Overlay{Site: "lab", Server: "https://198.18.0.1:8443", CA: string(ca), Env: map[string]string{"X": "1"}})

	cfg, err := Load(map[string]string{plan.CmdlineServer: "https://rogue:8443", plan.CmdlineNode: "a"}, root(t, built, doc, sig), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://198.18.0.1:8443" || cfg.Site != "lab" || cfg.RootCAs == nil || cfg.Env["X"] != "1" || cfg.Node != "a" {
		t.Errorf("from the overlay (the command line's server ignored): %+v", cfg)
	}
	if err := cfg.check(); err != nil {
		t.Errorf("a verified overlay over TLS needs no token: %v", err)
	}

	tampered := []byte(strings.Replace(string(doc), "198.18.0.1", "198.18.0.6", 1))
	for name, r := range map[string]string{
		"tampered": root(t, built, tampered, sig),
		"unsigned": root(t, built, doc, nil),
		"missing":  root(t, built, nil, nil),
		"other key": func() string {
			_, other, _ := ed25519.GenerateKey(nil)
			d, s, _ := trust.SignOverlay(other, trust.Overlay{Site: "lab", Server: "https://198.18.0.6:8443"})
			return root(t, built, d, s)
		}(),
	} {
		if _, err := Load(nil, r, t.TempDir()); err == nil {
			t.Errorf("%s overlay: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestLoadBuiltInAndBootInfo(t *testing.T) {
	sys := t.TempDir()
	os.MkdirAll(filepath.Join(sys, "firmware/efi/efivars"), 0o755)
	os.WriteFile(filepath.Join(sys, "firmware/efi/efivars/SecureBoot-"+efiGlobal), []byte{6, 0, 0, 0, 1}, 0o644)
	cfg, err := Load(map[string]string{}, root(t, trust.Config{Server: "https://198.18.0.1:8443", Site: "lab", Chain: plan.ChainUKI}, nil, nil), sys)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Boot.String(); got != "uefi, secure boot, uki, tls" {
		t.Errorf("boot: %q", got)
	}
	// https and no CA: refused before anything is sent.
	if err := cfg.check(); err == nil || !strings.Contains(err.Error(), "no site CA") {
		t.Errorf("https without a CA: %v", err)
	}
	// BIOS, plain HTTP, through iPXE, no token: refused.
	cfg, _ = Load(map[string]string{plan.CmdlineServer: "http://198.18.0.1:8080", plan.CmdlineSite: "lab", plan.CmdlineNode: "a"}, t.TempDir(), t.TempDir())
	if got := cfg.Boot.String(); got != "bios, ipxe, plain http" {
		t.Errorf("boot: %q", got)
	}
	if err := cfg.check(); err == nil || !strings.Contains(err.Error(), "bootops.token") {
		t.Errorf("plain HTTP without a token: %v", err)
	}
	os.WriteFile(filepath.Join(sys, "firmware/efi/efivars/SecureBoot-"+efiGlobal), []byte{6, 0, 0, 0, 0}, 0o644)
	cfg, _ = Load(map[string]string{plan.CmdlineChain: "shim"}, t.TempDir(), sys)
	if got := cfg.Boot.String(); got != "uefi, secure boot off, shim, plain http" {
		t.Errorf("boot: %q", got)
	}
}

// A server that cannot prove it holds the site CA's certificate is
// refused at once, with a message for the console, and nothing runs.
func TestRefusesServerOutsideSiteCA(t *testing.T) {
	dir := t.TempDir()
	trust.InitCA(dir, trust.CAOptions{Hosts: []string{"127.0.0.1"}})
	ca, _ := os.ReadFile(filepath.Join(dir, trust.CAFile))
	pool, _ := trust.PoolFromPEM(string(ca))
	hits := 0
	rogue := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer rogue.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var console strings.Builder
	ran := false
	err := Run(ctx, Config{Server: rogue.URL, Site: "lab", RootCAs: pool}, machineSysfs(t, "S-N1", "52:54:00:00:00:01"), &console, func(r *Runner) {
		r.Backoff = 100 * time.Millisecond
		r.Power = func(string) error { ran = true; return nil }
	})
	if err == nil || ran {
		t.Fatalf("ran against a rogue server: %v", err)
	}
	if !strings.Contains(console.String(), "REFUSED "+rogue.URL+": its certificate is not signed by the site CA") {
		t.Errorf("console:\n%s", console.String())
	}
	if hits != 0 {
		t.Errorf("%d requests reached the rogue server's handler", hits)
	}
}
