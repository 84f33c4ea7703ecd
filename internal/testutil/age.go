package testutil

import (
	"bytes"
	"io"
	"testing"

	"filippo.io/age"
	"filippo.io/age/armor"
)

// AgeArmor encrypts text to r, armored: what an installing agent escrows
// (a recovery key) and what Git holds of a BMC's password.
func AgeArmor(t testing.TB, r age.Recipient, text string) string {
	t.Helper()
	var b bytes.Buffer
	aw := armor.NewWriter(&b)
	w, err := age.Encrypt(aw, r)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, text)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
