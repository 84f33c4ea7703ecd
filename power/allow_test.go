package power

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"filippo.io/age/armor"

	"github.com/bootops/bootops/plan"
)

// ageValue is text encrypted to a new identity, armoured, as in Git.
func ageValue(t *testing.T, text string) ([]age.Identity, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	a := armor.NewWriter(&b)
	w, _ := age.Encrypt(a, id.Recipient())
	w.Write([]byte(text))
	w.Close()
	a.Close()
	return []age.Identity{id}, b.String()
}

func TestParseAllowList(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.0/24, bmc-rack1.example": "10.1.2.0/24, bmc-rack1.example",
		"10.1.2.7 BMC1.Example.":         "10.1.2.7/32, bmc1.example",
		"10.1.2.7/24,,fd00::/64":         "10.1.2.0/24, fd00::/64",
		"":                               "",
	} {
		a, err := ParseAllowList(in)
		if err != nil || a.String() != want {
			t.Errorf("%q: %q %v, want %q", in, a.String(), err, want)
		}
	}
	for in, want := range map[string]string{
		"10.1.2.0/33":         `"10.1.2.0/33": not an address, a network (CIDR) or a host name`,
		"*.bmc.example":       `"*.bmc.example": no wildcards: name each BMC or give its network (CIDR)`,
		"https://bmc.example": `"https://bmc.example": not an address`,
		"10.1.2":              `"10.1.2": not an address`,
	} {
		if _, err := ParseAllowList(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// A secret file names where its credentials may go on allow: lines after
// "username:password"; anything else there is refused, by line. An age
// value comes from Git, so allow: lines inside it count for nothing.
func TestSecretFileAllowLines(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rack"), []byte("admin:pw\nallow: 127.0.0.1, bmc1.example\n\n# the lab\nallow: 10.1.2.0/24\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "typo"), []byte("admin:pw\nalow: 10.1.2.0/24\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "bad"), []byte("admin:pw\nallow: 10.1.2.0/33\n"), 0o600)
	s := &Secrets{Dir: dir}
	c, err := s.Lookup(&plan.BMC{Secret: "rack"})
	if err != nil || c.Username != "admin" || c.Password != "pw" || c.Allow.String() != "127.0.0.1/32, 10.1.2.0/24, bmc1.example" {
		t.Errorf("rack: %+v %v", c, err)
	}
	for name, want := range map[string]string{
		"typo": `secret "typo" (` + filepath.Join(dir, "typo") + `): line 2: want "allow: ADDRESS|NETWORK|HOST[, …]"`,
		"bad":  `secret "bad" (` + filepath.Join(dir, "bad") + `): line 2: "10.1.2.0/33": not an address`,
	} {
		if _, err := s.Lookup(&plan.BMC{Secret: name}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	ids, ageText := ageValue(t, "root:calvin\nallow: 198.18.0.0/15\n")
	if _, err := (&Secrets{Identities: ids}).Lookup(&plan.BMC{Age: ageText}); err == nil || !strings.Contains(err.Error(), "age credentials: an allow: line inside an age value counts for nothing") {
		t.Errorf("allow: inside age: %v", err)
	}
}

// allowRig is a rig whose secret files say where they may go, and whose
// Dial keeps the address each BMC was reached at.
func allowRig(t *testing.T, nodes ...*plan.Node) (*rig, map[string]netip.Addr) {
	r := newRig(t, "", nodes...)
	dir := r.m.Secrets.Dir
	os.WriteFile(filepath.Join(dir, "loop"), []byte("admin:pw\nallow: 127.0.0.1, bmc-a.test\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "bare"), []byte("admin:pw\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "wide"), []byte("admin:pw\nallow: 127.0.0.0/8\n"), 0o600)
	dialed := map[string]netip.Addr{}
	r.m.Dial = func(b *plan.BMC, to netip.Addr, c Credentials) Controller {
		r.mu.Lock()
		dialed[b.Address] = to
		r.mu.Unlock()
		return r.bmcs[b.Address]
	}
	r.m.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "bmc-a.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.3")}, nil
		case "bmc-b.test":
			return []netip.Addr{netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("::ffff:127.0.0.4")}, nil
		case "evil.test":
			return []netip.Addr{netip.MustParseAddr("198.18.0.9")}, nil
		}
		return nil, errors.New("lookup " + host + ": no such host")
	}
	return r, dialed
}

func secretNode(name, addr, secret string) *plan.Node {
	return &plan.Node{Name: name, BMC: &plan.BMC{Address: addr, Protocol: plan.BMCIPMI, Secret: secret}}
}

// Git names a BMC's address and which secret it uses; the daemon's side
// says where each secret may be sent. Every refusal comes before any
// connection, says what and where, and a name is resolved once: the
// address checked is the one connected to.
func TestGitCannotSendSecretsElsewhere(t *testing.T) {
	ids, ageText := ageValue(t, "admin:pw")
	ageNode := &plan.Node{Name: "age", BMC: &plan.BMC{Address: "127.0.0.5", Protocol: plan.BMCIPMI, Age: ageText}}
	r, dialed := allowRig(t,
		secretNode("ok", "127.0.0.1", "loop"),
		secretNode("byname", "bmc-a.test", "loop"),       // allowed by name: its address, resolved once
		secretNode("bynet", "bmc-b.test", "wide"),        // the one allowed address of the two
		secretNode("other", "198.18.0.5", "loop"),        // Git points the secret elsewhere
		secretNode("loopback", "127.0.0.2", "loop"),      // a loopback address the file does not name
		secretNode("evil", "evil.test", "wide"),          // a name that resolves outside the file's network
		secretNode("nowhere", "nothing.invalid", "wide"), // a name that does not resolve
		secretNode("bare", "127.0.0.6", "bare"),          // a file without allow: lines, no --bmc-allow
		ageNode,                                          // age, no --bmc-allow
	)
	r.m.Secrets.Identities = ids
	dir := r.m.Secrets.Dir
	r.m.Round(context.Background())
	want := map[string]string{
		"other":    `secret "loop" may not be sent to 198.18.0.5: its file ` + filepath.Join(dir, "loop") + ` allows only 127.0.0.1/32, bmc-a.test`,
		"loopback": `secret "loop" may not be sent to 127.0.0.2: its file ` + filepath.Join(dir, "loop") + ` allows only 127.0.0.1/32, bmc-a.test`,
		"evil":     `secret "wide" may not be sent to evil.test (198.18.0.9): its file ` + filepath.Join(dir, "wide") + ` allows only 127.0.0.0/8`,
		"nowhere":  `secret "wide" may not be sent to nothing.invalid: it does not resolve: lookup nothing.invalid: no such host`,
		"bare":     `secret "bare" may not be sent to 127.0.0.6: neither its file ` + filepath.Join(dir, "bare") + ` nor the daemon's --bmc-allow says where it may go: add a line "allow: 127.0.0.6" (or its network, as CIDR) to the file`,
		"age":      `age credentials may not be sent to 127.0.0.5: the daemon has no --bmc-allow (an age value comes from Git: only the daemon says where it may go); start it with --bmc-allow and the BMCs' networks`,
	}
	for node, msg := range want {
		st, _ := r.m.Status("lab/" + node)
		if st.Power != Unreachable || st.Error != msg {
			t.Errorf("%s: %s %q\nwant %q", node, st.Power, st.Error, msg)
		}
	}
	for node, to := range map[string]string{"ok": "127.0.0.1", "byname": "127.0.0.3", "bynet": "127.0.0.4"} {
		addr := r.p.Sites[0].Nodes[0].BMC.Address
		for _, n := range r.p.Sites[0].Nodes {
			if n.Name == node {
				addr = n.BMC.Address
			}
		}
		if st, _ := r.m.Status("lab/" + node); st.Power != Off || dialed[addr].String() != to {
			t.Errorf("%s: %+v, reached at %s, want %s", node, st, dialed[addr], to)
		}
	}
	for _, addr := range []string{"198.18.0.5", "127.0.0.2", "evil.test", "nothing.invalid", "127.0.0.6", "127.0.0.5"} {
		if _, ok := dialed[addr]; ok {
			t.Errorf("%s was dialed", addr)
		}
	}

	// The daemon's --bmc-allow: for age values, and for files without
	// allow: lines; a file's own lines win over it.
	r.m.Allow, _ = ParseAllowList("127.0.0.5, 198.18.0.0/15")
	r.m.Round(context.Background())
	for _, node := range []string{"age", "bare"} {
		if st, _ := r.m.Status("lab/" + node); node == "age" && st.Power != Off {
			t.Errorf("age with --bmc-allow: %+v", st)
		}
	}
	if st, _ := r.m.Status("lab/bare"); !strings.Contains(st.Error, `secret "bare" may not be sent to 127.0.0.6: its file `+filepath.Join(dir, "bare")+` has no allow: lines and the daemon's --bmc-allow allows only 127.0.0.5/32, 198.18.0.0/15`) {
		t.Errorf("bare with --bmc-allow: %+v", st)
	}
	if st, _ := r.m.Status("lab/other"); !strings.Contains(st.Error, "may not be sent to 198.18.0.5") {
		t.Errorf("a file's allow: lines lost to --bmc-allow: %+v", st)
	}
	// An operator's action is checked the same way.
	if _, err := r.m.Act(context.Background(), "lab/other", "on"); err == nil || !strings.Contains(err.Error(), `secret "loop" may not be sent to 198.18.0.5`) {
		t.Errorf("operator's power on: %v", err)
	}
	if _, ok := dialed["198.18.0.5"]; ok {
		t.Error("198.18.0.5 was dialed")
	}
}

// tlsVerify: false in Git is the daemon's to allow.
func TestInsecureTLSNeedsTheDaemonsFlag(t *testing.T) {
	insecure := &plan.Node{Name: "rf", BMC: &plan.BMC{Address: "127.0.0.1", Port: 8443, Protocol: plan.BMCRedfish, Secret: "wide"}}
	verify := &plan.Node{Name: "rf2", BMC: &plan.BMC{Address: "127.0.0.2", Protocol: plan.BMCRedfish, TLSVerify: true, Secret: "wide"}}
	r, dialed := allowRig(t, insecure, verify, secretNode("ipmi", "127.0.0.3", "wide"))
	r.m.Round(context.Background())
	st, _ := r.m.Status("lab/rf")
	if want := "BMC 127.0.0.1:8443 (redfish): tlsVerify: false in Git, and this daemon does not allow it: start it with --bmc-insecure-tls-allowed, or give the BMC a certificate the daemon verifies"; st.Power != Unreachable || st.Error != want {
		t.Errorf("insecure: %+v\nwant %q", st, want)
	}
	if _, ok := dialed["127.0.0.1"]; ok {
		t.Error("the insecure BMC was dialed")
	}
	for _, node := range []string{"rf2", "ipmi"} {
		if st, _ := r.m.Status("lab/" + node); st.Power != Off {
			t.Errorf("%s: %+v", node, st)
		}
	}
	r.m.InsecureTLS = true
	r.m.Round(context.Background())
	if st, _ := r.m.Status("lab/rf"); st.Power != Off {
		t.Errorf("with --bmc-insecure-tls-allowed: %+v", st)
	}
}
