package trust

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An operator's certificate carries its role and name; the server's own
// certificate, though signed by the same CA, is no operator's.
func TestIssueOperator(t *testing.T) {
	dir := t.TempDir()
	if err := InitCA(dir, CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := IssueOperator(dir, "alice", "operate", 30, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, certPEM)
	if role, name, sn, ok := Operator(c); !ok || role != "operate" || name != "alice" || sn == "" {
		t.Errorf("Operator = %q %q %q %v", role, name, sn, ok)
	}
	srv, _ := os.ReadFile(filepath.Join(dir, ServerFile))
	if _, _, _, ok := Operator(parseCert(t, srv)); ok {
		t.Error("the server's certificate passes for an operator's")
	}
	for _, bad := range []struct{ name, role string }{{"alice", "admin"}, {"../x", "read"}, {"", "read"}} {
		if _, _, err := IssueOperator(dir, bad.name, bad.role, 30, time.Now()); err == nil {
			t.Errorf("%q %q: issued", bad.name, bad.role)
		}
	}
}

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Only a client offering OperatorALPN is asked for a certificate, and then
// must present one of the site CA: a machine's handshake (no ALPN, no
// certificate) goes through untouched.
func TestOperatorTLS(t *testing.T) {
	dir := t.TempDir()
	if err := InitCA(dir, CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFile))
	cas, _ := PoolFromPEM(string(caPEM))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", OperatorTLS(ServerTLS(pair), cas))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				who := "machine"
				if st := tc.ConnectionState(); len(st.VerifiedChains) > 0 {
					if role, name, _, ok := Operator(st.PeerCertificates[0]); ok {
						who = name + " " + role
					}
				}
				io.WriteString(c, who)
			}()
		}
	}()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := filepath.Join(dir, CAFile)
	dial := func(cfg *tls.Config) (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		return string(b), err
	}
	// A machine: no ALPN, no certificate.
	machine, err := ClientTLS("", "", caFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dial(machine); err != nil || got != "machine" {
		t.Errorf("a machine's handshake: %q %v", got, err)
	}
	// An operator.
	cp, kp, err := IssueOperator(dir, "bob", "read", 30, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	op, err := ClientTLS(write("bob.pem", cp, 0o644), write("bob-key.pem", kp, 0o600), caFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dial(op); err != nil || got != "bob read" {
		t.Errorf("an operator's handshake: %q %v", got, err)
	}
	// Offering the operators' protocol without a certificate, or with one
	// of another CA: no handshake.
	bare := machine.Clone()
	bare.NextProtos = []string{OperatorALPN}
	if got, err := dial(bare); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("an operator without a certificate: %q %v, want the server's 'certificate required'", got, err)
	}
	other := t.TempDir()
	if err := InitCA(other, CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	cp2, kp2, _ := IssueOperator(other, "mallory", "operate", 30, time.Now())
	forged, err := ClientTLS(write("m.pem", cp2, 0o644), write("m-key.pem", kp2, 0o600), caFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dial(forged); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("another CA's operator: %q %v, want the server's 'unknown certificate authority'", got, err)
	}
	// A key others may read is refused before it is used.
	if _, err := ClientTLS(write("c.pem", cp, 0o644), write("k.pem", kp, 0o644), caFile); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key: %v", err)
	}
}
