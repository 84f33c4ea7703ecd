package reconciler

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Local is a Git repository on disk, read for `bootops diff`: revisions
// come straight from its object store, no checkout, no worktree.
type Local struct {
	repo *git.Repository
	root string // the worktree's top folder
	sub  string // the folder asked for, relative to root ("." for the top)
}

// OpenLocal opens the repository that holds dir.
func OpenLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	repo, err := git.PlainOpenWithOptions(abs, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	if err != nil {
		return nil, fmt.Errorf("%s is not in a Git repository: %w", dir, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	root := wt.Filesystem.Root()
	// Reopened with one pack reader kept for every object read (go-git
	// opens the pack again per object otherwise).
	if st, err := os.Stat(filepath.Join(root, ".git")); err == nil && st.IsDir() {
		store := filesystem.NewStorageWithOptions(osfs.New(filepath.Join(root, ".git"), osfs.WithBoundOS()), cache.NewObjectLRU(16*cache.MiByte), filesystem.Options{KeepDescriptors: true, LargeObjectThreshold: 1 << 20})
		if r, err := git.Open(store, wt.Filesystem); err == nil {
			repo = r
		}
	}
	sub, err := filepath.Rel(root, abs)
	if err != nil || strings.HasPrefix(sub, "..") {
		return nil, fmt.Errorf("%s is outside its repository %s", dir, root)
	}
	return &Local{repo: repo, root: root, sub: filepath.ToSlash(sub)}, nil
}

// Revision is a resolved commit.
type Revision struct {
	Name   string // as asked
	Commit *object.Commit
	// Branch is true when the name is a branch (local or remote).
	Branch bool
}

// Short is the commit's abbreviated hash.
func (r Revision) Short() string { return r.Commit.Hash.String()[:7] }

// Resolve finds a branch, tag, remote branch or (abbreviated) SHA.
func (l *Local) Resolve(name string) (Revision, error) {
	h, err := l.repo.ResolveRevision(plumbing.Revision(name))
	if err != nil {
		hint := ""
		if ok, _ := l.shallow(); ok {
			hint = fmt.Sprintf(": this is a shallow clone; fetch what is missing, e.g. `git fetch --unshallow origin` or `git fetch origin %s` (in CI: fetch-depth: 0)", strings.TrimPrefix(name, "origin/"))
		} else if !strings.HasPrefix(name, "origin/") {
			hint = fmt.Sprintf(" (is it only on the remote? try origin/%s after `git fetch origin`)", name)
		}
		return Revision{}, fmt.Errorf("revision %q: %v%s", name, err, hint)
	}
	c, err := l.repo.CommitObject(*h)
	if err != nil {
		hint := ""
		if ok, _ := l.shallow(); ok {
			hint = "; this is a shallow clone: run `git fetch --unshallow origin` (in CI: fetch-depth: 0)"
		}
		return Revision{}, fmt.Errorf("revision %q (%s): %v%s", name, h.String()[:7], err, hint)
	}
	branch := false
	for _, full := range []string{"refs/heads/" + name, "refs/remotes/" + name} {
		if _, err := l.repo.Reference(plumbing.ReferenceName(full), false); err == nil {
			branch = true
		}
	}
	return Revision{Name: name, Commit: c, Branch: branch}, nil
}

// Head is the commit checked out.
func (l *Local) Head() (Revision, error) { return l.Resolve("HEAD") }

// MergeBase is where head diverged from base: what a pull request page
// compares against.
func (l *Local) MergeBase(base, head Revision) (*object.Commit, error) {
	bases, err := base.Commit.MergeBase(head.Commit)
	if err != nil {
		if ok, _ := l.shallow(); ok {
			return nil, fmt.Errorf("merge base of %s and %s: %v; this is a shallow clone: run `git fetch --unshallow origin` (in CI: fetch-depth: 0)", base.Name, head.Name, err)
		}
		return nil, fmt.Errorf("merge base of %s and %s: %w", base.Name, head.Name, err)
	}
	if len(bases) == 0 {
		return nil, fmt.Errorf("%s and %s have no common history", base.Name, head.Name)
	}
	return bases[0], nil
}

func (l *Local) shallow() (bool, error) {
	s, err := l.repo.Storer.Shallow()
	return len(s) > 0, err
}

// FS is a commit's tree (the folder asked for, within it), read from the
// object store, and its Files (for what changed between two: Changed).
func (l *Local) FS(c *object.Commit) (fs.FS, Files, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, Files{}, err
	}
	t, err := newTreeFS(l.repo.Storer, tree, Files{})
	if err != nil {
		return nil, Files{}, err
	}
	if l.sub == "." {
		return t, t.Files, nil
	}
	if _, err := t.lookup("stat", l.sub); err != nil {
		return nil, Files{}, fmt.Errorf("%s is not in commit %s", l.sub, c.Hash.String()[:7])
	}
	sub, err := fs.Sub(t, l.sub)
	if err != nil {
		return nil, Files{}, err
	}
	files := t.Files
	files.sub = l.sub
	return sub, files, nil
}
