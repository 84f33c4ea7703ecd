package reconciler

import (
	"bufio"
	"bytes"
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
	w := bufio.NewWriterSize(f, 1<<20)
	if err := encodeSaved(w, v); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
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

// encodeSaved writes v as JSON one node at a time: a 10,000-node Plan is
// about 17 MB of JSON, which json.Marshal would hold (and grow) in memory
// whole.
func encodeSaved(w io.Writer, v *Saved) error {
	head := *v
	head.Plan = nil
	b, err := json.Marshal(&head)
	if err != nil {
		return err
	}
	// {"source":…,"plan":null} → {"source":…,"plan":{…}}
	b = bytes.TrimSuffix(b, []byte(`"plan":null}`))
	w.Write(b)
	p := v.Plan
	put := func(prefix string, x any) error {
		b, err := json.Marshal(x)
		if err != nil {
			return err
		}
		w.Write([]byte(prefix))
		_, err = w.Write(b)
		return err
	}
	if err := put(`"plan":{"hash":`, p.Hash); err != nil {
		return err
	}
	if err := put(`,"profiles":`, p.Profiles); err != nil {
		return err
	}
	if err := put(`,"microOS":`, p.MicroOS); err != nil {
		return err
	}
	w.Write([]byte(`,"sites":[`))
	for i, site := range p.Sites {
		if i > 0 {
			w.Write([]byte(","))
		}
		sh := *site
		sh.Nodes = nil
		b, err := json.Marshal(&sh)
		if err != nil {
			return err
		}
		// The nodes are the site's last field: {…,"nodes":null}.
		b, ok := bytes.CutSuffix(b, []byte(`"nodes":null}`))
		if !ok {
			return errors.New("state: the site's JSON does not end with its nodes")
		}
		w.Write(b)
		w.Write([]byte(`"nodes":[`))
		for j, n := range site.Nodes {
			sep := ","
			if j == 0 {
				sep = ""
			}
			if err := put(sep, n); err != nil {
				return err
			}
		}
		w.Write([]byte("]}"))
	}
	_, err = w.Write([]byte("]}}\n"))
	return err
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
