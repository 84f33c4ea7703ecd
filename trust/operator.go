package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// OperatorALPN is the TLS application protocol an operator's client offers
// to present a client certificate: only then does the HTTPS listener ask
// for one. Machines (UEFI firmware, iPXE, the agent) never offer it, and are
// never asked — iPXE gives up on a handshake that asks it for a certificate
// it does not have.
const OperatorALPN = "bootops-operator"

// operatorURI is the URI SAN that makes a certificate of the site CA an
// operator's, with its role: urn:bootops:operator:read or …:operate.
const operatorURI = "urn:bootops:operator:"

// OperatorRoles are the roles an operator certificate may carry.
var OperatorRoles = []string{"read", "operate"}

// operatorName is what an operator may be called: it becomes the
// certificate's common name and the files' names.
var operatorName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// IssueOperator makes an operator's client certificate, signed by the site
// CA in dir, for name with role, valid for days: the certificate (PEM) and
// its private key (PEM, ECDSA P-256).
func IssueOperator(dir, name, role string, days int, now time.Time) (cert, key []byte, err error) {
	if !slices.Contains(OperatorRoles, role) {
		return nil, nil, fmt.Errorf("role %q: want read or operate", role)
	}
	u, _ := url.Parse(operatorURI + role)
	return issue(dir, name, days, now, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: []string{"bootops operators"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{u},
	})
}

// issue signs tmpl (its names, usages and URIs) for name with the CA in
// dir, valid for days from now, with a new ECDSA P-256 key: the
// certificate and its private key, PEM.
func issue(dir, name string, days int, now time.Time, tmpl *x509.Certificate) (cert, key []byte, err error) {
	switch {
	case !operatorName.MatchString(name):
		return nil, nil, fmt.Errorf("name %q: letters, digits, '.', '_', '@', '-', at most 64", name)
	case days < 1 || days > 825:
		return nil, nil, fmt.Errorf("%d days: want 1 to 825", days)
	}
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return nil, nil, err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.AddDate(0, 0, days)
	tmpl.KeyUsage, tmpl.BasicConstraintsValid = x509.KeyUsageDigitalSignature, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// loadCA reads the site CA and its key from dir.
func loadCA(dir string) (*x509.Certificate, any, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("the site CA: %w (bootops ca init makes it)", err)
	}
	keyFile := filepath.Join(dir, CAKeyFile)
	if err := private(keyFile); err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s: no PEM block", filepath.Join(dir, CAFile), keyFile)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, CAFile), err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	return ca, key, nil
}

// Operator is what a verified client certificate says of its holder: the
// role and name IssueOperator gave it, and its serial number (hex), by
// which it can be revoked. ok is false for any certificate that is not an
// operator's (the server's own, a machine's).
func Operator(c *x509.Certificate) (role, name, serialHex string, ok bool) {
	if c == nil || !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || c.IsCA {
		return "", "", "", false
	}
	for _, u := range c.URIs {
		if r, found := strings.CutPrefix(u.String(), operatorURI); found && slices.Contains(OperatorRoles, r) {
			return r, c.Subject.CommonName, c.SerialNumber.Text(16), true
		}
	}
	return "", "", "", false
}

// OperatorTLS makes ServerTLS's configuration ask operators' clients (those
// offering OperatorALPN) for a certificate of cas, and require it; nobody
// else is asked.
func OperatorTLS(cfg *tls.Config, cas *x509.CertPool) *tls.Config {
	operators := cfg.Clone()
	operators.ClientAuth = tls.RequireAndVerifyClientCert
	operators.ClientCAs = cas
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Contains(h.SupportedProtos, OperatorALPN) {
			return operators, nil
		}
		return nil, nil
	}
	return cfg
}

// ClientTLS is an operator's client configuration: its certificate and key
// (files), offering OperatorALPN, and the CA bundle (a file; "" for the
// system's roots) that must have signed the server.
func ClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		if cfg.RootCAs, err = PoolFromPEM(string(b)); err != nil {
			return nil, fmt.Errorf("%s: %w", caFile, err)
		}
	}
	if certFile == "" && keyFile == "" {
		return cfg, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("an operator's certificate needs both its certificate and its key")
	}
	if err := private(keyFile); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{pair}
	cfg.NextProtos = []string{OperatorALPN, "http/1.1"}
	return cfg, nil
}
