package trust

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The files of a site's trust folder (<state-dir>/tls), as `bootops ca
// init` writes them. The keys are 0600; only the certificates and the
// overlay's public key may leave the machine.
const (
	CAFile         = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerFile     = "server.pem"
	ServerKeyFile  = "server-key.pem"
	OverlayKeyFile = "overlay.key"
	OverlayPubFile = "overlay.pub"
)

// CAOptions says what InitCA makes.
type CAOptions struct {
	// Hosts are the server certificate's names: IP addresses and DNS
	// names the agents reach the boot server by.
	Hosts []string
	// Force replaces files already there.
	Force bool
	Now   time.Time
}

// InitCA writes a site CA, a server certificate it signs for opt.Hosts,
// and an overlay signing key into dir (created 0700). It refuses to
// replace any of them unless opt.Force.
func InitCA(dir string, opt CAOptions) error {
	if len(opt.Hosts) == 0 {
		return errors.New("ca init: give the server's addresses or names (--host 198.18.0.1)")
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	if !opt.Force {
		if err := refuseExisting(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, caDER, err := newSiteCA(opt.Now)
	if err != nil {
		return err
	}
	srvKey, srvDER, err := newServerCert(caKey, caDER, opt.Hosts, opt.Now)
	if err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	caKeyDER, _ := x509.MarshalPKCS8PrivateKey(caKey)
	srvKeyDER, _ := x509.MarshalPKCS8PrivateKey(srvKey)
	files := []struct {
		name string
		mode os.FileMode
		data []byte
	}{
		{CAFile, 0o644, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})},
		{CAKeyFile, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: caKeyDER})},
		// The server sends its certificate and the CA's: a client that
		// pins the CA verifies the chain.
		{ServerFile, 0o644, append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)},
		{ServerKeyFile, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: srvKeyDER})},
		{OverlayKeyFile, 0o600, []byte(base64.StdEncoding.EncodeToString(priv.Seed()) + "\n")},
		{OverlayPubFile, 0o644, []byte(base64.StdEncoding.EncodeToString(pub) + "\n")},
	}
	for _, f := range files {
		if err := WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// refuseExisting fails if dir holds any file InitCA writes.
func refuseExisting(dir string) error {
	for _, f := range []string{CAFile, CAKeyFile, ServerFile, ServerKeyFile, OverlayKeyFile, OverlayPubFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("ca init: %s already exists: keep it, or give --force to replace the site's CA (every Micro-OS built with the old one must then be rebuilt)", filepath.Join(dir, f))
		}
	}
	return nil
}

// newSiteCA makes the site CA's key and self-signed certificate, valid
// for ten years from now. RSA 2048: UEFI firmware's TLS (EDK2's HTTPS
// boot) offers only RSA suites and verifies only RSA signatures; the agent
// takes either.
func newSiteCA(now time.Time) (*rsa.PrivateKey, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "bootops site CA", Organization: []string{"bootops"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, ca, ca, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	return key, der, nil
}

// newServerCert makes the boot server's key and a certificate for hosts
// (the first its common name), signed by the CA caDER with caKey and valid
// for two years from now.
func newServerCert(caKey *rsa.PrivateKey, caDER []byte, hosts []string, now time.Time) (*rsa.PrivateKey, []byte, error) {
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	srv := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0], Organization: []string{"bootops"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(2, 0, 0),
		// keyEncipherment: the firmware's suites use RSA key exchange.
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	addHosts(srv, hosts)
	der, err := x509.CreateCertificate(rand.Reader, srv, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	return key, der, nil
}

// addHosts names hosts in c: IP addresses ("[2001:db8::1]" as in a URL
// too) and DNS names.
func addHosts(c *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(h), "["), "]")
		if ip := net.ParseIP(h); ip != nil {
			c.IPAddresses = append(c.IPAddresses, ip)
		} else if h != "" {
			c.DNSNames = append(c.DNSNames, h)
		}
	}
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

// WriteFile writes name whole, with mode from the start (a key is never
// readable by others, not even for a moment), so a reader never sees half
// a file.
func WriteFile(name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	if err = f.Chmod(mode); err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// CheckPrivate refuses a private key file that others may read.
func CheckPrivate(name string) error { return private(name) }

// ServerTLS is the HTTPS listener's configuration: TLS 1.2 and 1.3, and
// besides the ECDHE suites Go prefers, the RSA key-exchange ones, the only
// ones UEFI firmware's HTTPS boot offers (EDK2 2022.11: RSA and DHE-RSA
// suites, no SNI, no elliptic curves). They come last: a client that can
// do better does.
func ServerTLS(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_256_CBC_SHA,
		},
	}
}
