package power

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"

	"github.com/bootops/bootops/plan"
)

// Credentials are a BMC's username and password, and where they may be
// sent.
type Credentials struct {
	Username, Password string
	// Allow is what their secret file's allow: lines admit; empty: what
	// the daemon's --bmc-allow does.
	Allow AllowList

	ref  string // names them in errors: `secret "rack1"`, "age credentials"
	file string // their secret file, "" for an age value
}

// Secrets finds a BMC's credentials from its reference in the Plan: a file
// under Dir, or an age-encrypted value decrypted with Identities. Neither
// is ever in Git in clear.
type Secrets struct {
	// Dir holds one file per secret name, "username:password" on its first
	// line, then "allow: …" lines that say where it may be sent (see
	// ParseAllowList), readable by its owner only (mode 0600 or 0400).
	Dir string
	// Identities decrypt the age values of the Plan.
	Identities []age.Identity
}

// LoadIdentities reads an age identity file (age-keygen's output), which
// must be readable by its owner only.
func LoadIdentities(path string) ([]age.Identity, error) {
	if err := privateFile(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ids, err := age.ParseIdentities(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ids, nil
}

// Lookup returns b's credentials, or an error that says which reference
// failed and how to mend it.
func (s *Secrets) Lookup(b *plan.BMC) (Credentials, error) {
	switch {
	case b.Secret != "":
		return s.file(b.Secret)
	case b.Age != "":
		return s.decrypt(b.Age)
	}
	return Credentials{}, errors.New("the BMC has no credentials reference")
}

func (s *Secrets) file(name string) (Credentials, error) {
	if s.Dir == "" {
		return Credentials{}, fmt.Errorf("secret %q: the daemon has no --secrets-dir", name)
	}
	if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return Credentials{}, fmt.Errorf("secret %q: not a file name", name)
	}
	path := filepath.Join(s.Dir, name)
	if err := privateFile(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Credentials{}, fmt.Errorf("secret %q: no file %s", name, path)
		}
		return Credentials{}, fmt.Errorf("secret %q: %w", name, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("secret %q: %w", name, err)
	}
	c, rest, err := parseCredentials(string(b))
	if err == nil {
		c.Allow, err = parseAllowLines(rest)
	}
	if err != nil {
		return Credentials{}, fmt.Errorf("secret %q (%s): %w", name, path, err)
	}
	c.ref, c.file = fmt.Sprintf("secret %q", name), path
	return c, nil
}

// parseAllowLines reads a secret file's lines after the first: "allow:"
// lines, blank lines and "#" comments.
func parseAllowLines(lines []string) (AllowList, error) {
	var a AllowList
	var errs []error
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		v, ok := strings.CutPrefix(l, "allow:")
		if !ok {
			errs = append(errs, fmt.Errorf(`line %d: want "allow: ADDRESS|NETWORK|HOST[, …]" (or a # comment)`, i+2))
			continue
		}
		more, err := ParseAllowList(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", i+2, err))
		}
		a.Prefixes = append(a.Prefixes, more.Prefixes...)
		a.Names = append(a.Names, more.Names...)
	}
	return a, errors.Join(errs...)
}

func (s *Secrets) decrypt(armored string) (Credentials, error) {
	if len(s.Identities) == 0 {
		return Credentials{}, errors.New("age credentials: the daemon has no --age-identity to decrypt them")
	}
	r, err := age.Decrypt(armor.NewReader(strings.NewReader(strings.TrimSpace(armored)+"\n")), s.Identities...)
	if err != nil {
		return Credentials{}, fmt.Errorf("age credentials: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return Credentials{}, fmt.Errorf("age credentials: %w", err)
	}
	c, rest, err := parseCredentials(string(b))
	if err != nil {
		return Credentials{}, fmt.Errorf("age credentials: %w", err)
	}
	// Anyone may encrypt to the daemon's recipient: where an age value may
	// be sent is for --bmc-allow alone to say.
	for _, l := range rest {
		if strings.HasPrefix(strings.TrimSpace(l), "allow:") {
			return Credentials{}, errors.New("age credentials: an allow: line inside an age value counts for nothing (whoever commits it wrote it): remove it, and name the BMCs' networks with the daemon's --bmc-allow")
		}
	}
	c.ref = "age credentials"
	return c, nil
}

// parseCredentials reads "username:password" from the first line (the
// password may hold ':'), and returns the other lines.
func parseCredentials(s string) (Credentials, []string, error) {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	user, pass, ok := strings.Cut(strings.TrimRight(lines[0], "\r"), ":")
	if !ok || user == "" {
		return Credentials{}, nil, errors.New(`want "username:password" on the first line`)
	}
	return Credentials{Username: user, Password: pass}, lines[1:], nil
}

// privateFile refuses a file that its group or others may read or write.
func privateFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: others may read it (chmod 600 %s)", path, m, path)
	}
	return nil
}
