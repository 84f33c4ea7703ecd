package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// A record the site's server vouches for (a retired node's erase
// certificate): a JSON document, its kind, and an ed25519 signature over
// both (kind, a newline, the document: a signature of one kind never
// passes for another), with the public key that made it. Anyone holding
// the server's public key (records.pub) checks it offline.
type Record struct {
	Kind      string          `json:"kind"`
	Document  json.RawMessage `json:"document"`
	Key       string          `json:"key"`       // base64 ed25519 public key
	Signature string          `json:"signature"` // base64
}

// The kinds of record.
const KindEraseCertificate = "bootops erase certificate v1"

// SignRecord signs doc (JSON) as a record of kind with key; the record's
// JSON, indented.
func SignRecord(key ed25519.PrivateKey, kind string, doc []byte) ([]byte, error) {
	var c bytes.Buffer
	if err := json.Compact(&c, doc); err != nil {
		return nil, fmt.Errorf("sign a record: the document is not JSON: %w", err)
	}
	doc = c.Bytes()
	r := Record{Kind: kind, Document: doc, Key: base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)),
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, recordMessage(kind, doc)))}
	return json.MarshalIndent(r, "", "  ")
}

// recordMessage is what a record's signature is over: its kind, a
// newline, and its document without insignificant white space (so a
// record printed again with other indentation still verifies; a changed
// value does not).
func recordMessage(kind string, doc []byte) []byte {
	var c bytes.Buffer
	if json.Compact(&c, doc) != nil {
		return nil
	}
	return append([]byte(kind+"\n"), c.Bytes()...)
}

// VerifyRecord checks a record of kind against the trusted public key:
// made by it, of this kind, the document as signed. It gives the document
// (without insignificant white space).
func VerifyRecord(b []byte, kind string, trusted ed25519.PublicKey) ([]byte, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("not a signed record: %w", err)
	}
	if r.Kind != kind {
		return nil, fmt.Errorf("a record of kind %q, not %q", r.Kind, kind)
	}
	key, err := ParsePublicKey(r.Key)
	if err != nil {
		return nil, fmt.Errorf("the record's key: %w", err)
	}
	if !key.Equal(trusted) {
		return nil, fmt.Errorf("signed by key %s, not by the one trusted (%s)", KeyID(key), KeyID(trusted))
	}
	sig, err := base64.StdEncoding.DecodeString(r.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, errors.New("the record's signature is not an ed25519 signature in base64")
	}
	msg := recordMessage(kind, r.Document)
	if msg == nil || !ed25519.Verify(key, msg, sig) {
		return nil, errors.New("the signature does not match the document: it was changed after it was signed")
	}
	return msg[len(kind)+1:], nil // the document as signed
}

// KeyID names a public key in a few characters: its base64's first 12.
func KeyID(k ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(k)[:12]
}

// RecordKey reads the server's record signing key from name (base64 of a
// 32-byte seed, mode 0600), making it the first time, with its public key
// beside it (name with .pub for .key: base64, for whoever checks records).
func RecordKey(name string) (ed25519.PrivateKey, error) {
	if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
		seed := make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		if err := os.WriteFile(name, []byte(base64.StdEncoding.EncodeToString(seed)+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	key, err := ReadOverlayKey(name)
	if err != nil {
		return nil, err
	}
	pub := strings.TrimSuffix(name, ".key") + ".pub"
	if err := os.WriteFile(pub, []byte(base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))+"\n"), 0o644); err != nil {
		return nil, err
	}
	return key, nil
}

// ReadPublicKeyFile reads a public key file (base64 ed25519, as records.pub
// and overlay.pub are written).
func ReadPublicKeyFile(name string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	k, err := ParsePublicKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return k, nil
}
