// Package trust holds what lets a Micro-OS trust its boot server and the
// server prove itself: the agent's built-in settings (server URL, site CA,
// overlay keys; inside a signed UKI they are covered by Secure Boot), the
// signed site overlay a generic Micro-OS gets beside its initramfs, and
// the site CA and server certificate `bootops ca init` makes.
//
// The overlay is a JSON document and its ed25519 signature, two files of
// a small cpio archive the kernel unpacks over the Micro-OS's own
// (OverlayPath, OverlaySigPath). The agent refuses an overlay that is not
// signed by one of the keys it was built with.
package trust

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Where the Micro-OS keeps them.
const (
	ConfigPath     = "/etc/bootops/agent.json"   // built in by `bootops microos build`
	OverlayPath    = "/etc/bootops/overlay.json" // from the site overlay
	OverlaySigPath = "/etc/bootops/overlay.sig"  // its signature, base64
)

// Config is the agent's built-in settings.
type Config struct {
	// Server is the boot server's base URL the agent reports to; with
	// https, CA must verify it.
	Server string `json:"server,omitempty"`
	Site   string `json:"site,omitempty"`
	// CA is the PEM site CA the agent pins for https.
	CA string `json:"ca,omitempty"`
	// OverlayKeys are the ed25519 public keys (base64) a site overlay
	// must be signed with; set, the agent refuses to run without one.
	OverlayKeys []string `json:"overlayKeys,omitempty"`
	// Chain names how this Micro-OS boots when the image says it itself
	// (a UKI: "uki").
	Chain string `json:"chain,omitempty"`
}

// Overlay is a site's part of a generic Micro-OS.
type Overlay struct {
	Site   string            `json:"site"`
	Server string            `json:"server"`
	CA     string            `json:"ca,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
}

// SignOverlay gives the overlay's document and its signature (base64).
func SignOverlay(key ed25519.PrivateKey, o Overlay) (doc, sig []byte, err error) {
	doc, err = json.MarshalIndent(o, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	doc = append(doc, '\n')
	return doc, []byte(base64.StdEncoding.EncodeToString(ed25519.Sign(key, doc)) + "\n"), nil
}

// VerifyOverlay checks doc against sig with each of keys (base64 ed25519
// public keys) and reads it.
func VerifyOverlay(keys []string, doc, sig []byte) (Overlay, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig)))
	if err != nil || len(raw) != ed25519.SignatureSize {
		return Overlay{}, errors.New("the overlay's signature is not an ed25519 signature in base64")
	}
	for _, k := range keys {
		pub, err := ParsePublicKey(k)
		if err != nil {
			return Overlay{}, err
		}
		if ed25519.Verify(pub, doc, raw) {
			var o Overlay
			if err := json.Unmarshal(doc, &o); err != nil {
				return Overlay{}, fmt.Errorf("the overlay is signed but unreadable: %w", err)
			}
			if o.Server == "" || o.Site == "" {
				return Overlay{}, errors.New("the overlay is signed but names no server or site")
			}
			return o, nil
		}
	}
	return Overlay{}, fmt.Errorf("the overlay's signature does not verify with any of the %d key(s) this Micro-OS trusts: tampered, or signed by another site", len(keys))
}

// ParsePublicKey reads a base64 ed25519 public key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("overlay key %q is not an ed25519 public key in base64", s)
	}
	return ed25519.PublicKey(b), nil
}

// ReadOverlayKey reads a private overlay key file (base64 of its 32-byte
// seed, as `bootops ca init` writes it), refusing one readable by others.
func ReadOverlayKey(name string) (ed25519.PrivateKey, error) {
	if err := private(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%s: not an ed25519 key (base64 of a 32-byte seed)", name)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// PoolFromPEM makes the certificate pool of a PEM bundle, refusing one
// with no certificate in it.
func PoolFromPEM(bundle string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	rest := []byte(bundle)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("site CA: %w", err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("site CA: no PEM certificate in it")
	}
	return pool, nil
}

// private refuses a key file that others than its owner may read.
func private(name string) error {
	st, err := os.Stat(name)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %04o): chmod 600 it", name, st.Mode().Perm())
	}
	return nil
}
