package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A record verifies with its key; changed in any byte of its document, of
// another kind, or checked with another key, it does not.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	key, err := RecordKey(filepath.Join(dir, "records.key"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := RecordKey(filepath.Join(dir, "records.key"))
	if err != nil || !again.Equal(key) {
		t.Fatalf("the key made again: %v", err)
	}
	pub, err := ReadPublicKeyFile(filepath.Join(dir, "records.pub"))
	if err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("records.pub: %v", err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "records.key")); st.Mode().Perm() != 0o600 {
		t.Errorf("records.key has mode %o", st.Mode().Perm())
	}
	doc := []byte(`{"node":"r1","disks":[{"serial":"NV-1","method":"nvme format: crypto erase (SES=2)"}]}`)
	rec, err := SignRecord(key, KindEraseCertificate, doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyRecord(rec, KindEraseCertificate, pub)
	if err != nil || !bytes.Equal(got, doc) {
		t.Fatalf("verify: %s, %v", got, err)
	}
	edited := bytes.Replace(rec, []byte("SES=2"), []byte("SES=1"), 1)
	if _, err := VerifyRecord(edited, KindEraseCertificate, pub); err == nil || !strings.Contains(err.Error(), "changed after it was signed") {
		t.Errorf("an edited record: %v", err)
	}
	if _, err := VerifyRecord(rec, "another kind", pub); err == nil {
		t.Error("a record checked as another kind passed")
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := VerifyRecord(rec, KindEraseCertificate, other); err == nil || !strings.Contains(err.Error(), "not by the one trusted") {
		t.Errorf("another key: %v", err)
	}
	// Signed by another key that puts itself in the record: refused too.
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	forged, _ := SignRecord(otherKey, KindEraseCertificate, doc)
	if _, err := VerifyRecord(forged, KindEraseCertificate, pub); err == nil {
		t.Error("a record signed by another key passed")
	}
}
