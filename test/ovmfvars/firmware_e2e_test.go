//go:build e2e

package ovmfvars_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/test/ovmfvars"
	"github.com/bootops/bootops/trust"
)

const desc = "bootops HTTPS boot"

// bootCase is one VM: the store template, the URI and CAs written into
// it, and what must follow.
type bootCase struct {
	name, mac, template, uri string
	cas                      [][]byte // nil: no TlsCaCertificate variable
	// console is the line that ends the wait, {opt} standing for the
	// option's variable name (Boot0000 in an empty store). fetched: the firmware must
	// GET the program; otherwise it must request nothing under the case's
	// path, and handshake is what the server logged of the VM's failed TLS
	// handshake ("": the VM must not have reached the server at all).
	console   string
	fetched   bool
	handshake string
}

var (
	runs    = "Open Source Network Boot Firmware" // iPXE's banner: the program runs
	givesUp = fmt.Sprintf("failed to load {opt} %q from Uri(", desc)
)

// TestBootURI proves the store this package writes with real firmware:
// Debian's OVMF (4 MiB) boots an HTTPS URL from a Boot#### option whose
// device path is a lone URI node, trusting the CA of TlsCaCertificate,
// on a LAN whose DHCP server gives addresses only; with another CA in
// the list it refuses the server. (What else was found by trying — no CA,
// Go's default suites, plain http, a Secure Boot store, a link without
// DHCP — is in docs/edge.md; TestEdgeOverTheInternet provisions a machine
// by this path.)
func TestBootURI(t *testing.T) {
	l := newLab(t, true)
	good, wrong := newPKI(t, "bootops e2e CA"), newPKI(t, "some other CA")
	program, err := os.ReadFile(bootEFI)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l.servers(rec, program, map[string]*tls.Config{
		":443":  trust.ServerTLS(good.cert),                   // bootops' own listener settings
		":8443": {Certificates: []tls.Certificate{good.cert}}, // Go's defaults
	})
	plain := ovmfDir + "/OVMF_VARS_4M.fd"
	https := "https://" + serverIP
	for _, c := range []bootCase{
		{name: "https", mac: "52:54:00:40:00:01", template: plain, uri: https + "/https/boot.efi",
			cas: [][]byte{good.caDER}, console: runs, fetched: true},
		// The firmware resets the connection when the chain fails: no alert.
		{name: "wrongca", mac: "52:54:00:40:00:02", template: plain, uri: https + "/wrongca/boot.efi",
			cas: [][]byte{wrong.caDER}, console: givesUp, handshake: "connection reset by peer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l.boot(t, rec, c)
		})
	}
}

// boot writes c into a copy of its template, boots a VM from it and
// checks what the servers and the console saw.
func (l *lab) boot(t *testing.T, rec *recorder, c bootCase) {
	template, err := os.ReadFile(c.template)
	if err != nil {
		t.Fatal(err)
	}
	vars, err := ovmfvars.SetBootURI(template, desc, c.uri)
	if err != nil {
		t.Fatal(err)
	}
	if c.cas != nil {
		if vars, err = ovmfvars.SetTLSCA(vars, c.cas...); err != nil {
			t.Fatal(err)
		}
	}
	want := strings.ReplaceAll(c.console, "{opt}", firstOption(t, vars))
	from := rec.len()
	console, started, vm := l.vm(c.name, c.mac, vars)
	defer vm.kill()
	ok := waitConsole(console, want, vm, vmLimit)
	got := rec.since(from)
	t.Logf("%s: %q on the console: %v after %s", c.name, want, ok, time.Since(started).Round(time.Second))
	logRequests(t, got, started)
	logConsole(t, consoleText(console))
	if !ok {
		t.Fatalf("%q never came on the console; console:\n%s", want, testutil.Tail(consoleText(console), 40))
	}
	path := "/" + c.name + "/boot.efi"
	fetched := slices.ContainsFunc(got, func(q request) bool {
		return q.Method == "GET" && q.Path == path && q.BytesServed > 0 && q.TLS == strings.HasPrefix(c.uri, "https")
	})
	switch {
	case c.fetched && !fetched:
		t.Errorf("no GET of %s was served (over TLS: %v)", path, strings.HasPrefix(c.uri, "https"))
	case !c.fetched && slices.ContainsFunc(got, func(q request) bool { return q.Path == path }):
		t.Errorf("the firmware gave the option up, yet requested %s", path)
	case !c.fetched:
		l.checkRefusal(t, c, got)
	default:
		vm.kill()
		l.checkKept(t, c.name)
	}
}

// firstOption is the name of the first option of BootOrder in vars.
func firstOption(t *testing.T, vars []byte) string {
	s, err := ovmfvars.Parse(vars)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := s.Get("BootOrder", ovmfvars.GlobalVariable)
	o := ovmfvars.BootOrder(v.Data)
	if len(o) == 0 {
		t.Fatal("no BootOrder after SetBootURI")
	}
	return fmt.Sprintf("Boot%04X", o[0])
}

// checkRefusal checks what the server saw from the VM's address: a
// failed handshake saying c.handshake, or with c.handshake "" nothing.
// Without DHCP in the lab the VM has no address, and the server must
// have seen nothing from anyone.
func (l *lab) checkRefusal(t *testing.T, c bootCase, got []request) {
	ip := leaseOf(l.dir, c.mac)
	if l.dhcp == (ip == "") {
		t.Fatalf("%s leased %q in a lab with DHCP %v", c.mac, ip, l.dhcp)
	}
	fromVM := func(q request) bool { return ip == "" || strings.HasPrefix(q.Remote, ip+":") }
	failed := slices.ContainsFunc(got, func(q request) bool {
		return q.Err != "" && fromVM(q) && strings.Contains(q.Err, c.handshake)
	})
	switch {
	case c.handshake != "" && !failed:
		t.Errorf("no failed TLS handshake from %s saying %q", ip, c.handshake)
	case c.handshake == "" && slices.ContainsFunc(got, fromVM):
		t.Errorf("the firmware reached the server, though it must give up before")
	}
}

// checkKept reads the store the firmware ran with: its own variables
// appended, the option ours and still first.
func (l *lab) checkKept(t *testing.T, name string) {
	b, err := os.ReadFile(filepath.Join(l.dir, name+".vars.fd"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ovmfvars.Parse(b)
	if err != nil {
		t.Fatalf("the store after the firmware ran: %v", err)
	}
	first := firstOption(t, b)
	v, ok := s.Get(first, ovmfvars.GlobalVariable)
	opt, _ := ovmfvars.ParseLoadOption(v.Data)
	order, _ := s.Get("BootOrder", ovmfvars.GlobalVariable)
	if uri, _ := ovmfvars.PathURI(opt.FilePath); !ok || opt.Description != desc || uri == "" || len(ovmfvars.BootOrder(order.Data)) < 2 {
		t.Errorf("after the boot, BootOrder %v starts with %s %q (URI %q); want ours, first of several", ovmfvars.BootOrder(order.Data), first, opt.Description, uri)
	}
	t.Logf("%s: the firmware's store now holds %d variables, %d bytes free", name, len(s.Variables), s.Free())
}

// leaseOf is the address dnsmasq leased to mac, or "".
func leaseOf(dir, mac string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "leases"))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == mac {
			return f[2]
		}
	}
	return ""
}

// logConsole logs what the firmware said of the network boots.
func logConsole(t *testing.T, text string) {
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, ">>") || strings.HasPrefix(line, "Error") ||
			strings.HasPrefix(line, "Station") || strings.HasPrefix(line, "BdsDxe") && strings.Contains(line, desc) {
			t.Logf("  console: %s", line)
		}
	}
}

func logRequests(t *testing.T, got []request, started time.Time) {
	for _, q := range got {
		if q.Err != "" {
			t.Logf("  +%5.1fs TLS handshake from %s failed: %s", q.At.Sub(started).Seconds(), q.Remote, q.Err)
			continue
		}
		t.Logf("  +%5.1fs %s %s from %s tls=%v version=%#x suite=%s", q.At.Sub(started).Seconds(), q.Method, q.Path, q.Remote,
			q.TLS, q.TLSVersion, tls.CipherSuiteName(q.Cipher))
	}
}

// TestRealTemplates edits every store Debian's ovmf package ships (the
// 2 MiB and 4 MiB ones, with and without Secure Boot keys): what was
// there stays byte for byte, and the new variables read back.
func TestRealTemplates(t *testing.T) {
	files, _ := filepath.Glob(ovmfDir + "/OVMF_VARS*.fd")
	if len(files) < 4 {
		t.Fatalf("found %v: install Debian's ovmf", files)
	}
	ca := newPKI(t, "ca").caDER
	for _, f := range files {
		orig, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		before, err := ovmfvars.Parse(orig)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out, err := ovmfvars.SetBootURI(orig, desc, "https://"+serverIP+"/x.efi")
		if err == nil {
			out, err = ovmfvars.SetTLSCA(out, ca)
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		after, err := ovmfvars.Parse(out)
		if err != nil {
			t.Fatalf("%s after the edit: %v", f, err)
		}
		for i, v := range before.Variables {
			w := after.Variables[i]
			// Only a replaced BootOrder may change, and only its state.
			replaced := v.Name == "BootOrder" && v.Live() && !w.Live()
			if w.Offset != v.Offset || !bytes.Equal(withoutState(out, v), withoutState(orig, v)) || w.State != v.State && !replaced {
				t.Errorf("%s: %s at %#x changed", f, v.Name, v.Offset)
			}
		}
		if _, ok := after.Get(ovmfvars.TLSCAName, ovmfvars.TLSCACertificate); !ok || len(after.Variables) != len(before.Variables)+3 {
			t.Errorf("%s: %d variables after adding Boot####, BootOrder and TlsCaCertificate to %d", f, len(after.Variables), len(before.Variables))
		}
		t.Logf("%s: %d variables, %d of %d bytes free before", filepath.Base(f), len(before.Variables), before.Free(), len(orig))
	}
}

// withoutState is v's bytes in b with the state byte cleared.
func withoutState(b []byte, v ovmfvars.Variable) []byte {
	c := bytes.Clone(b[v.Offset:v.End])
	c[2] = 0
	return c
}
