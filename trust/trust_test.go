package trust

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOverlaySignVerify(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	otherPub, _, _ := ed25519.GenerateKey(nil)
	keys := []string{base64.StdEncoding.EncodeToString(otherPub), base64.StdEncoding.EncodeToString(pub)}
	o := Overlay{Site: "lab", Server: "https://198.18.0.1:8443", CA: "PEM", Env: map[string]string{"A": "1"}}
	doc, sig, err := SignOverlay(priv, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyOverlay(keys, doc, sig)
	if err != nil || got.Server != o.Server || got.Env["A"] != "1" {
		t.Fatalf("verify: %+v, %v", got, err)
	}
	// Any changed byte of the document, or a key that did not sign it, is refused.
	for i := range doc {
		bad := append([]byte(nil), doc...)
		bad[i] ^= 1
		if _, err := VerifyOverlay(keys, bad, sig); err == nil {
			t.Fatalf("a flipped bit at %d verified", i)
		}
	}
	if _, err := VerifyOverlay(keys[:1], doc, sig); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("another site's key: %v", err)
	}
	if _, err := VerifyOverlay(keys, doc, []byte("not base64!")); err == nil {
		t.Fatal("a garbled signature verified")
	}
	if _, err := VerifyOverlay(keys, doc, nil); err == nil {
		t.Fatal("an unsigned overlay verified")
	}
}

func TestInitCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if err := InitCA(dir, CAOptions{Hosts: []string{"198.18.0.1", "boot.lab"}}); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]os.FileMode{CAFile: 0o644, CAKeyFile: 0o600, ServerFile: 0o644, ServerKeyFile: 0o600, OverlayKeyFile: 0o600, OverlayPubFile: 0o644} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %v", f, err, st.Mode().Perm(), want)
		}
	}
	if err := InitCA(dir, CAOptions{Hosts: []string{"198.18.0.1"}}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second init replaced the CA: %v", err)
	}
	// The server certificate verifies for both names against the CA alone.
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFile))
	pool, err := PoolFromPEM(string(caPEM))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, host := range []string{"198.18.0.1", "boot.lab"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "198.18.0.3"}); err == nil {
		t.Error("the certificate verified for an address it does not name")
	}
	// The overlay key reads back and signs what overlay.pub verifies.
	key, err := ReadOverlayKey(filepath.Join(dir, OverlayKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := os.ReadFile(filepath.Join(dir, OverlayPubFile))
	doc, sig, _ := SignOverlay(key, Overlay{Site: "lab", Server: "https://198.18.0.1:8443"})
	if _, err := VerifyOverlay([]string{string(pub)}, doc, sig); err != nil {
		t.Error(err)
	}
	os.Chmod(filepath.Join(dir, OverlayKeyFile), 0o644)
	if _, err := ReadOverlayKey(filepath.Join(dir, OverlayKeyFile)); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("a world-readable key was used: %v", err)
	}
	if _, err := PoolFromPEM("nothing"); err == nil {
		t.Error("a CA bundle without certificates was accepted")
	}
}

// The HTTPS listener's configuration completes a handshake with a client
// that offers what UEFI firmware's HTTPS boot offers: TLS 1.2, RSA key
// exchange only, no SNI; and verifies against the site CA for the IP.
func TestServerTLSTakesFirmwareSuites(t *testing.T) {
	dir := t.TempDir()
	if err := InitCA(dir, CAOptions{Hosts: []string{"198.18.0.1"}}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFile))
	pool, _ := PoolFromPEM(string(caPEM))
	for _, suite := range []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_AES_256_CBC_SHA} {
		c, s := net.Pipe()
		srv := tls.Server(s, ServerTLS(pair))
		go srv.Handshake()
		cli := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "198.18.0.1", MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite},
			CurvePreferences: []tls.CurveID{}})
		if err := cli.Handshake(); err != nil {
			t.Errorf("%s: %v", tls.CipherSuiteName(suite), err)
		} else if got := cli.ConnectionState().CipherSuite; got != suite {
			t.Errorf("negotiated %s", tls.CipherSuiteName(got))
		}
		c.Close()
		s.Close()
	}
}
