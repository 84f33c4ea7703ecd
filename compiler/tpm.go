package compiler

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/tpm"
)

// checkEKCAs checks site s's tpm.ekCAs, each a file in the repository of
// PEM CA certificates, and keeps what they hold for the Plan.
func (r *repo) checkEKCAs(s *object) {
	list := s.v.lookup("tpm", "ekCAs")
	if list == nil {
		return
	}
	var cas []plan.EKCA
	for i, v := range list.list {
		pos, field := Pos{s.file, v.line, v.col}, indexPath("tpm.ekCAs", i)
		clean := path.Clean(v.str)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			r.errorf(pos, field, "%q leaves the repository", v.str)
			continue
		}
		data, _, e := readFile(r.fsys, clean)
		if e != nil {
			r.errorf(pos, field, "%q: %s", v.str, e.Msg)
			continue
		}
		if err := checkCAs(data); err != nil {
			r.errorf(pos, field, "%q: %v", v.str, err)
			continue
		}
		sum := sha256.Sum256(data)
		cas = append(cas, plan.EKCA{Path: clean, SHA256: hex.EncodeToString(sum[:]), PEM: string(data)})
	}
	if len(cas) > 0 {
		r.ekCAs[s.name] = cas
	}
}

// checkCAs says what is wrong with a file of EK CA certificates: it must
// hold one or more PEM CERTIFICATE blocks (text around them is allowed),
// and none may be a certificate that says it is not a CA.
func checkCAs(data []byte) error {
	n := 0
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		n++
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("PEM block %d is a %s, not a CERTIFICATE", n, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("certificate %d: %v", n, err)
		}
		if c.BasicConstraintsValid && !c.IsCA {
			return fmt.Errorf("certificate %d (%s) is not a CA (basic constraints CA:FALSE): list the CAs EK certificates chain to, not an EK certificate", n, c.Subject)
		}
	}
	if n == 0 {
		return errors.New("no PEM certificate in it: want -----BEGIN CERTIFICATE----- blocks (a DER file converts with openssl x509 -inform der -in ca.cer -out ca.pem)")
	}
	return nil
}

// attestationRequire is where nodes of profile p at site s are told to
// attest their boot: the profile's attestation.require over the site's;
// nil when neither says.
func attestationRequire(s, p *object) (*value, *object) {
	for _, o := range []*object{p, s} {
		if v := o.v.lookup("attestation", "require"); v != nil && v.kind == kBool {
			return v, o
		}
	}
	return nil, nil
}

// attestation is node n's attestation policy; nil when it need not attest.
func (r *repo) attestation(n *nodeObj) *plan.Attestation {
	s, p := r.sites[n.site], r.profiles[n.profile]
	if s == nil || p == nil {
		return nil
	}
	if v, _ := attestationRequire(s, p); v != nil && v.b {
		return &plan.Attestation{Require: true}
	}
	return nil
}

// bootArtifact is the field of Micro-OS m whose PE image UEFI firmware
// measures into PCR 4: the UKI under chain uki, else the kernel.
func bootArtifact(m *object) string {
	if m.str("chain") == plan.ChainUKI {
		return "uki"
	}
	return "kernel"
}

// checkAttestation: a Micro-OS booted by nodes that must attest is a file
// in the repository, so the digest PCR 4 is checked against is Git's; its
// digest is kept for the Plan. Every site and profile pair counts, with
// or without nodes, so that a change to nodes alone never changes it.
func (r *repo) checkAttestation() {
	seen := map[string]bool{}
	for _, sn := range sortedKeys(r.sites) {
		s := r.sites[sn]
		for _, pn := range sortedKeys(r.profiles) {
			p := r.profiles[pn]
			v, from := attestationRequire(s, p)
			m := r.microOS[p.str("microOS")]
			if v == nil || !v.b || m == nil || seen[from.kind+"/"+from.name+"/"+m.name] {
				continue
			}
			seen[from.kind+"/"+from.name+"/"+m.name] = true
			art := bootArtifact(m)
			if m.v.lookup(art, "url") != nil {
				what := fmt.Sprintf("profile %s boots micro-os %s", pn, m.name)
				if from == s {
					what = fmt.Sprintf("site %s requires it, and profile %s boots micro-os %s", sn, pn, m.name)
				}
				r.errorf(Pos{from.file, v.line, v.col}, "attestation.require", "%s, whose %s is a URL: attestation checks PCR 4 against the digest of a file in the repository (give micro-os %s a %s.path)", what, art, m.name, art)
				continue
			}
			r.peDigestOf(m, art)
		}
	}
}

// peDigestOf keeps the PE digest of Micro-OS m's artifact art, a path
// checkMicroOS found to be a file.
func (r *repo) peDigestOf(m *object, art string) {
	if r.peDigests[m.name] != "" {
		return
	}
	data, err := fs.ReadFile(r.fsys, path.Clean(m.str(art, "path")))
	if err != nil {
		return // checkMicroOS reported it
	}
	d, err := tpm.PEDigest(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		r.errorf(m.pos(art, "path"), art+".path", "%q: attestation needs its PE digest: %v", m.str(art, "path"), err)
		return
	}
	r.peDigests[m.name] = d
}
