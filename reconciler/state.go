package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
)

// State is the daemon's state folder: the last good Plan, so that a
// restart while the source is unreachable serves at once, and the Micro-OS
// files a Git revision holds, so that they are served from disk.
type State struct {
	Dir string

	copied map[string]string // path in FilesDir → the blob copied there
}

// Saved is the last good Plan with where it came from.
type Saved struct {
	Source   string     `json:"source"`
	Revision string     `json:"revision"`
	Message  string     `json:"message,omitempty"`
	At       time.Time  `json:"at"`
	Plan     *plan.Plan `json:"plan"`
}

const savedName = "last-good.json"

// Save writes the Plan atomically: a crash leaves the old file or the new
// one, never half of one.
func (s *State) Save(v *Saved) error {
	f, err := os.CreateTemp(s.Dir, ".last-good-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := json.NewEncoder(f).Encode(v); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(s.Dir, savedName))
}

// Load reads the last good Plan; nil when there is none.
func (s *State) Load() (*Saved, error) {
	f, err := os.Open(filepath.Join(s.Dir, savedName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var v Saved
	if err := json.NewDecoder(f).Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if v.Plan == nil || plan.PlanHash(v.Plan) != v.Plan.Hash {
		return nil, fmt.Errorf("%s: the kept plan does not match its hash: ignored", f.Name())
	}
	return &v, nil
}

// FilesDir holds the repository files Micro-OS objects point at, by path.
func (s *State) FilesDir() string { return filepath.Join(s.Dir, "files") }

// copier streams one file of a snapshot and names its content; treeFS does
// it without holding the whole blob in memory.
type copier interface {
	CopyTo(name string, w io.Writer) (int64, error)
	BlobID(name string) string
}

// Materialize copies the repository files that the Plan's Micro-OS objects
// point at from the snapshot into FilesDir, each replaced atomically (a
// machine reading the old file keeps reading it) and only when its content
// changed.
func (s *State) Materialize(fsys fs.FS, p *plan.Plan) error {
	for _, m := range p.MicroOS {
		for _, a := range []plan.Artifact{m.Kernel, m.Initrd} {
			if a.Path == "" {
				continue
			}
			if err := s.materialize(fsys, a); err != nil {
				return fmt.Errorf("micro-os %s: %s: %w", m.Name, a.Path, err)
			}
		}
	}
	return nil
}

func (s *State) materialize(fsys fs.FS, a plan.Artifact) error {
	clean := path.Clean(a.Path)
	if !fs.ValidPath(clean) || strings.HasPrefix(clean, "../") {
		return errors.New("not a path inside the repository")
	}
	dst := filepath.Join(s.FilesDir(), filepath.FromSlash(clean))
	c, _ := fsys.(copier)
	id := a.SHA256
	if c != nil {
		id = c.BlobID(clean)
	}
	if s.copied == nil {
		s.copied = map[string]string{}
	}
	if id != "" && s.copied[clean] == id {
		return nil
	}
	if a.SHA256 != "" && s.copied[clean] == "" && fileSHA256(dst) == a.SHA256 {
		s.copied[clean] = id // kept from before a restart
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	w := io.MultiWriter(tmp, h)
	if c != nil {
		_, err = c.CopyTo(clean, w)
	} else {
		var f fs.File
		if f, err = fsys.Open(clean); err == nil {
			_, err = io.Copy(w, f)
			f.Close()
		}
	}
	if err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); a.SHA256 != "" && got != a.SHA256 {
		return fmt.Errorf("sha256 is %s, the Micro-OS object says %s", got, a.SHA256)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	s.copied[clean] = id
	return nil
}

func fileSHA256(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
