package tpm

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/go-tpm/legacy/tpm2"
)

// Clevis's tpm2 pin, as the installed OS's initramfs reads it
// (clevis-initramfs, clevis decrypt): a JWE whose content key is sealed
// in the TPM. The agent seals an encrypted install's first-boot key this
// way, with no PCR policy: the PCR values worth sealing to are those of
// the installed OS's own boot, not the Micro-OS's, so the installed OS
// seals again at its first boot (clevis luks bind) and drops this one.
// Until then the key opens the disk in this TPM only, under any boot.
//
// What clevis encrypt tpm2 '{"hash":"sha256","key":"ecc"}' does, and
// what clevis decrypt tpm2 undoes:
//
//	tpm2_createprimary -C o -g sha256 -G ecc   (the owner's ECC P-256 storage key, tpm2-tools' template)
//	tpm2_create -g sha256 -a fixedtpm|fixedparent|noda|adminwithpolicy|userwithauth -i <JWK>
//	jose jwe enc (alg dir, enc A256GCM) with that JWK, the blobs in the protected header

// clevisPrimary is tpm2-tools' template for `tpm2_createprimary -G ecc
// -g sha256`: a restricted decryption key (a storage key), ECC NIST
// P-256, AES-128-CFB for its children, no unique value. The owner's seed
// and this template give the same key at every boot.
var clevisPrimary = tpm2.Public{
	Type:    tpm2.AlgECC,
	NameAlg: tpm2.AlgSHA256,
	Attributes: tpm2.FlagRestricted | tpm2.FlagDecrypt | tpm2.FlagFixedTPM | tpm2.FlagFixedParent |
		tpm2.FlagSensitiveDataOrigin | tpm2.FlagUserWithAuth,
	ECCParameters: &tpm2.ECCParams{
		Symmetric: &tpm2.SymScheme{Alg: tpm2.AlgAES, KeyBits: 128, Mode: tpm2.AlgCFB},
		CurveID:   tpm2.CurveNISTP256,
	},
}

// clevisSealed is the sealed object's template: a keyed-hash object
// holding data, usable with its (empty) password since there is no
// policy.
var clevisSealed = tpm2.Public{
	Type:                tpm2.AlgKeyedHash,
	NameAlg:             tpm2.AlgSHA256,
	Attributes:          tpm2.FlagFixedTPM | tpm2.FlagFixedParent | tpm2.FlagNoDA | tpm2.FlagAdminWithPolicy | tpm2.FlagUserWithAuth,
	KeyedHashParameters: &tpm2.KeyedHashParams{Alg: tpm2.AlgNull},
}

// ClevisJWE is a Clevis JWE in JSON form (flattened), as a LUKS2 clevis
// token holds it.
type ClevisJWE struct {
	Protected    string `json:"protected"`
	EncryptedKey string `json:"encrypted_key"`
	IV           string `json:"iv"`
	Ciphertext   string `json:"ciphertext"`
	Tag          string `json:"tag"`
}

// Compact is the JWE's compact form (clevis decrypt reads it).
func (j ClevisJWE) Compact() string {
	return j.Protected + "." + j.EncryptedKey + "." + j.IV + "." + j.Ciphertext + "." + j.Tag
}

// LUKSToken is the LUKS2 token Clevis keeps beside the keyslot it opens
// (cryptsetup token import).
func (j ClevisJWE) LUKSToken(keyslot int) ([]byte, error) {
	return json.Marshal(struct {
		Type     string    `json:"type"`
		Keyslots []string  `json:"keyslots"`
		JWE      ClevisJWE `json:"jwe"`
	}{"clevis", []string{fmt.Sprint(keyslot)}, j})
}

var b64 = base64.RawURLEncoding

// ClevisSeal encrypts secret with Clevis's tpm2 pin and no PCR policy,
// its key sealed in the TPM on rw (a command channel: the device or a
// simulator).
func ClevisSeal(rw io.ReadWriter, secret []byte) (ClevisJWE, error) {
	cek := make([]byte, 32)
	if _, err := rand.Read(cek); err != nil {
		return ClevisJWE{}, err
	}
	jwk, err := json.Marshal(map[string]any{"alg": "A256GCM", "k": b64.EncodeToString(cek), "key_ops": []string{"encrypt", "decrypt"}, "kty": "oct"})
	if err != nil {
		return ClevisJWE{}, err
	}
	parent, _, err := tpm2.CreatePrimary(rw, tpm2.HandleOwner, tpm2.PCRSelection{}, "", "", clevisPrimary)
	if err != nil {
		return ClevisJWE{}, fmt.Errorf("tpm: clevis: storage key: %w", err)
	}
	defer tpm2.FlushContext(rw, parent)
	priv, pub, _, _, _, err := tpm2.CreateKeyWithSensitive(rw, parent, tpm2.PCRSelection{}, "", "", clevisSealed, jwk)
	if err != nil {
		return ClevisJWE{}, fmt.Errorf("tpm: clevis: seal: %w", err)
	}
	header, err := json.Marshal(map[string]any{
		"alg": "dir", "enc": "A256GCM",
		"clevis": map[string]any{"pin": "tpm2", "tpm2": map[string]string{
			"hash": "sha256", "key": "ecc",
			// tpm2_load -u and -r read TPM2B structures: sized.
			"jwk_pub": b64.EncodeToString(sized(pub)), "jwk_priv": b64.EncodeToString(sized(priv)),
		}},
	})
	if err != nil {
		return ClevisJWE{}, err
	}
	protected := b64.EncodeToString(header)
	block, err := aes.NewCipher(cek)
	if err != nil {
		return ClevisJWE{}, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return ClevisJWE{}, err
	}
	iv := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(iv); err != nil {
		return ClevisJWE{}, err
	}
	sealed := gcm.Seal(nil, iv, secret, []byte(protected))
	ct, tag := sealed[:len(sealed)-gcm.Overhead()], sealed[len(sealed)-gcm.Overhead():]
	return ClevisJWE{Protected: protected, IV: b64.EncodeToString(iv), Ciphertext: b64.EncodeToString(ct), Tag: b64.EncodeToString(tag)}, nil
}
