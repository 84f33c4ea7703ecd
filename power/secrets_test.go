package power

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"filippo.io/age/armor"

	"github.com/bootops/bootops/plan"
)

func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good"), []byte("admin:pa:ss\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "open"), []byte("admin:pw\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "nouser"), []byte("password-only\n"), 0o400)
	s := &Secrets{Dir: dir}
	c, err := s.Lookup(&plan.BMC{Secret: "good"})
	if err != nil || c.Username != "admin" || c.Password != "pa:ss" {
		t.Errorf("good: %+v %v", c, err)
	}
	for name, want := range map[string]string{
		"open":    "has mode 0644: others may read it (chmod 600 ",
		"nouser":  `want "username:password" on the first line`,
		"missing": `secret "missing": no file ` + filepath.Join(dir, "missing"),
		"../good": "not a file name",
	} {
		if _, err := s.Lookup(&plan.BMC{Secret: name}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if _, err := (&Secrets{}).Lookup(&plan.BMC{Secret: "good"}); err == nil || !strings.Contains(err.Error(), "no --secrets-dir") {
		t.Errorf("no dir: %v", err)
	}
}

func TestAgeSecrets(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	other, _ := age.GenerateX25519Identity()
	var b strings.Builder
	a := armor.NewWriter(&b)
	w, _ := age.Encrypt(a, id.Recipient())
	w.Write([]byte("root:calvin"))
	w.Close()
	a.Close()
	dir := t.TempDir()
	idFile := filepath.Join(dir, "age.key")
	os.WriteFile(idFile, []byte("# created: now\n"+id.String()+"\n"), 0o600)
	ids, err := LoadIdentities(idFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := (&Secrets{Identities: ids}).Lookup(&plan.BMC{Age: b.String()})
	if err != nil || c.Username != "root" || c.Password != "calvin" {
		t.Errorf("decrypt: %+v %v", c, err)
	}
	if _, err := (&Secrets{Identities: []age.Identity{other}}).Lookup(&plan.BMC{Age: b.String()}); err == nil || !strings.Contains(err.Error(), "no identity matched") {
		t.Errorf("another identity: %v", err)
	}
	if _, err := (&Secrets{}).Lookup(&plan.BMC{Age: b.String()}); err == nil || !strings.Contains(err.Error(), "no --age-identity") {
		t.Errorf("no identity: %v", err)
	}
	os.Chmod(idFile, 0o640)
	if _, err := LoadIdentities(idFile); err == nil || !strings.Contains(err.Error(), "mode 0640") {
		t.Errorf("an identity others may read: %v", err)
	}
}
