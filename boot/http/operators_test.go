package http

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/trust"
)

func TestParseOperators(t *testing.T) {
	o, err := ParseOperators("ops", "# who\nread reader-token-0123456789 alice\noperate operator-token-0123456789\nrevoked 0A:0b:CC carol\n\n")
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]Role{"reader-token-0123456789": RoleRead, "operator-token-0123456789": RoleOperate, "other-token-0123456789": RoleNone, "": RoleNone} {
		r := httptest.NewRequest("GET", "/api/v1/status", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		if got, _ := o.RoleOf(r); got != want {
			t.Errorf("%q: %v, want %v", tok, got, want)
		}
	}
	if !o.revoked["a0bcc"] {
		t.Errorf("revoked serials %v, want a0bcc", o.revoked)
	}
	for _, bad := range []string{"admin some-token-0123456789", "read short", "read a-token-0123456789 name extra", "revoked", "revoked xyz", "revoked 01 carol extra"} {
		if _, err := ParseOperators("ops", "\n"+bad+"\n"); err == nil || !strings.HasPrefix(err.Error(), "ops:2: ") {
			t.Errorf("%q: %v, want an error at ops:2", bad, err)
		}
	}
}

// A verified operator certificate gives its role unless revoked; a
// certificate that is no operator's gives nothing.
func TestCertificateRole(t *testing.T) {
	dir := t.TempDir()
	if err := trust.InitCA(dir, trust.CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	cert := func(name, role string) *x509.Certificate {
		b, _, err := trust.IssueOperator(dir, name, role, 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, carol := cert("alice", "operate"), cert("carol", "read")
	o, err := ParseOperators("ops", "revoked "+carol.SerialNumber.Text(16)+" carol\n")
	if err != nil {
		t.Fatal(err)
	}
	with := func(c *x509.Certificate, verified bool) Role {
		r := httptest.NewRequest("GET", "/api/v1/status", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
		if verified {
			r.TLS.VerifiedChains = [][]*x509.Certificate{{c}}
		}
		got, _ := o.RoleOf(r)
		return got
	}
	if got := with(alice, true); got != RoleOperate {
		t.Errorf("alice: %v", got)
	}
	if got := with(alice, false); got != RoleNone {
		t.Errorf("alice's certificate, not verified by the handshake: %v", got)
	}
	if got := with(carol, true); got != RoleNone {
		t.Errorf("carol, revoked: %v", got)
	}
	ca := cert("x", "read")
	ca.IsCA = true
	if got := with(ca, true); got != RoleNone {
		t.Errorf("a CA certificate: %v", got)
	}
}
