package reconciler

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Git reads one ref of a remote repository: it lists the remote's refs to
// see whether the ref moved, and when it did, fetches it (the first time a
// single-branch clone without tags, then into that clone: only the new
// objects) and reads the commit's tree straight from the object store.
type Git struct {
	URL string
	// Ref is a branch, a tag, a full ref name (refs/…) or a commit SHA;
	// empty: the remote's default branch (HEAD).
	Ref string
	// Credentials.
	Username     string // https (default "git" when a password is set)
	Password     string // https password or token
	SSHKeyFile   string // ssh private key
	SSHKeyPass   string
	KnownHosts   string // ssh known_hosts file
	CABundle     []byte // https: extra CA certificates (PEM)
	WorkDir      string // clones go in folders below it
	auth         transport.AuthMethod
	authResolved bool

	// kept is the clone kept between fetches of a moving ref: a fetch then
	// brings only what changed (one commit, its trees, the changed blobs),
	// not the whole tree again.
	kept      *keptClone
	keptFresh int // fetches into kept since it was cloned
	// files are the tree opened last: the next one takes its unchanged
	// folders' indexes from it (by tree hash, whatever clone it came from).
	files Files
}

// keptClone is the clone Fetch reuses.
type keptClone struct {
	dir   string
	repo  *git.Repository
	store *filesystem.Storage
	ref   plumbing.ReferenceName
}

// keptFetches bounds the fetches into one kept clone: each adds a pack,
// so after that many the next fetch clones afresh.
const keptFetches = 500

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Pinned reports whether the ref is a commit: it never moves, so it is
// fetched once.
func (g *Git) Pinned() bool { return shaRE.MatchString(g.Ref) }

// Redacted is the URL without its password, fit for logs and status.
func Redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// IsGitURL tells a Git remote from a local folder: a URL with a scheme,
// or scp-style user@host:path.
func IsGitURL(s string) bool {
	if strings.Contains(s, "://") {
		return true
	}
	return scpRE.MatchString(s)
}

var scpRE = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/]?`)

// Check verifies the configuration before any network use: the URL's
// kind and the credentials it needs.
func (g *Git) Check() error {
	_, err := g.authMethod()
	return err
}

func (g *Git) authMethod() (transport.AuthMethod, error) {
	if g.authResolved {
		return g.auth, nil
	}
	ep, err := transport.NewEndpoint(g.URL)
	if err != nil {
		return nil, fmt.Errorf("git: %s: not a Git URL: %w", Redacted(g.URL), err)
	}
	var auth transport.AuthMethod
	switch ep.Protocol {
	case "ssh":
		if g.SSHKeyFile == "" {
			return nil, fmt.Errorf("git: %s is an ssh URL: give the private key with --git-ssh-key (and the server's key with --git-known-hosts)", Redacted(g.URL))
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeysFromFile(user, g.SSHKeyFile, g.SSHKeyPass)
		if err != nil {
			return nil, fmt.Errorf("git: ssh key %s: %w", g.SSHKeyFile, err)
		}
		var files []string
		if g.KnownHosts != "" {
			files = []string{g.KnownHosts}
		}
		cb, err := gitssh.NewKnownHostsCallback(files...)
		if err != nil {
			return nil, fmt.Errorf("git: ssh known hosts: %w (give the server's public key in a known_hosts file with --git-known-hosts)", err)
		}
		keys.HostKeyCallback = cb
		auth = keys
	case "http", "https":
		if g.Password != "" {
			user := g.Username
			if user == "" {
				user = "git"
			}
			auth = &githttp.BasicAuth{Username: user, Password: g.Password}
		}
	case "file", "git":
	default:
		return nil, fmt.Errorf("git: %s: protocol %q is not supported (use https, ssh, git or file)", Redacted(g.URL), ep.Protocol)
	}
	g.auth, g.authResolved = auth, true
	return auth, nil
}

// Head lists the remote's refs and returns the ref's full name and the
// commit it points at (for an annotated tag, the commit it peels to).
func (g *Git) Head(ctx context.Context) (plumbing.ReferenceName, plumbing.Hash, error) {
	if g.Pinned() {
		return "", plumbing.NewHash(g.Ref), nil
	}
	auth, err := g.authMethod()
	if err != nil {
		return "", plumbing.ZeroHash, err
	}
	rem := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{g.URL}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: auth, CABundle: g.CABundle, PeelingOption: git.AppendPeeled})
	if err != nil {
		return "", plumbing.ZeroHash, fmt.Errorf("git: list %s: %w", Redacted(g.URL), explain(err))
	}
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, r := range refs {
		byName[r.Name()] = r
	}
	var candidates []plumbing.ReferenceName
	switch {
	case g.Ref == "" || g.Ref == "HEAD":
		head := byName[plumbing.HEAD]
		if head == nil {
			var branches []string
			for _, r := range refs {
				if r.Name().IsBranch() {
					branches = append(branches, r.Name().Short())
				}
			}
			slices.Sort(branches)
			return "", plumbing.ZeroHash, fmt.Errorf("git: %s has no HEAD (or it names a branch that does not exist): name a branch with --ref (branches: %s)", Redacted(g.URL), strings.Join(branches, ", "))
		}
		if head.Type() == plumbing.SymbolicReference {
			candidates = []plumbing.ReferenceName{head.Target()}
		} else {
			candidates = []plumbing.ReferenceName{plumbing.HEAD}
		}
	case strings.HasPrefix(g.Ref, "refs/"):
		candidates = []plumbing.ReferenceName{plumbing.ReferenceName(g.Ref)}
	default:
		candidates = []plumbing.ReferenceName{plumbing.NewBranchReferenceName(g.Ref), plumbing.NewTagReferenceName(g.Ref)}
	}
	for _, name := range candidates {
		if r := byName[name]; r != nil {
			if peeled := byName[name+"^{}"]; peeled != nil {
				return name, peeled.Hash(), nil
			}
			return name, r.Hash(), nil
		}
	}
	return "", plumbing.ZeroHash, fmt.Errorf("git: %s has no branch or tag %q", Redacted(g.URL), g.Ref)
}

// Checkout is one fetched commit, read from the object store.
type Checkout struct {
	Commit *object.Commit
	FS     *treeFS
	dir    string
	store  *filesystem.Storage
	kept   bool
}

// Close closes the object store and removes the clone (a kept clone
// stays for the next fetch).
func (c *Checkout) Close() error {
	if c.kept {
		return nil
	}
	c.store.Close()
	return os.RemoveAll(c.dir)
}

// Fetch brings ref (as Head named it) and opens the commit want: into the
// clone kept from the last fetch of that ref, else into a new clone (kept
// for the next time). A pinned commit is fetched with its history, since a
// server need not serve a single commit by SHA, into a clone of its own.
func (g *Git) Fetch(ctx context.Context, ref plumbing.ReferenceName, want plumbing.Hash) (*Checkout, error) {
	auth, err := g.authMethod()
	if err != nil {
		return nil, err
	}
	if !g.Pinned() && g.kept != nil && g.kept.ref == ref && g.keptFresh < keptFetches {
		co, err := g.fetchKept(ctx, auth)
		if err == nil {
			return co, nil
		}
		// Whatever went wrong with the kept clone, a fresh one is the
		// remedy (and the error, if it fails too, is the clone's).
		g.dropKept()
	}
	g.dropKept()
	dir, st, err := g.newClone()
	if err != nil {
		return nil, err
	}
	repo, commit, tfs, err := g.cloneCommit(ctx, st, ref, want, auth)
	if err != nil {
		st.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	if !g.Pinned() {
		// Kept for the next fetch of the ref.
		g.kept, g.keptFresh = &keptClone{dir: dir, repo: repo, store: st, ref: ref}, 0
		return &Checkout{Commit: commit, FS: tfs, dir: dir, store: st, kept: true}, nil
	}
	return &Checkout{Commit: commit, FS: tfs, dir: dir, store: st}, nil
}

// FetchKept fetches ref into the clone kept from the last fetch of it and
// opens the commit it now names: one connection to the remote, whose
// answer to the fetch says where the ref is (no listing first). ok is
// false when there is no such clone (pinned, none yet, another ref, or
// due for a fresh clone); a kept clone that fails to fetch is dropped, so
// the next look clones afresh.
func (g *Git) FetchKept(ctx context.Context, ref plumbing.ReferenceName) (co *Checkout, ok bool, err error) {
	if g.Pinned() || g.kept == nil || g.kept.ref != ref || g.keptFresh >= keptFetches {
		return nil, false, nil
	}
	auth, err := g.authMethod()
	if err != nil {
		return nil, true, err
	}
	if co, err = g.fetchKept(ctx, auth); err != nil {
		g.dropKept()
		return nil, true, err
	}
	return co, true, nil
}

// newClone makes a folder in WorkDir for a new clone, and its object
// store. On disk, not in memory: a big file or a big pack does not grow
// the daemon; objects above 1 MiB are read from the pack when needed.
// KeepDescriptors: one pack reader for every object read, not one (with
// its buffers) per object.
func (g *Git) newClone() (string, *filesystem.Storage, error) {
	if err := os.MkdirAll(g.WorkDir, 0o700); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp(g.WorkDir, "fetch-")
	if err != nil {
		return "", nil, err
	}
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(4*cache.MiByte), filesystem.Options{LargeObjectThreshold: 1 << 20, KeepDescriptors: true})
	return dir, st, nil
}

// cloneCommit clones the remote into st and opens the commit to serve:
// want when pinned, else the commit ref names in the clone.
func (g *Git) cloneCommit(ctx context.Context, st *filesystem.Storage, ref plumbing.ReferenceName, want plumbing.Hash, auth transport.AuthMethod) (*git.Repository, *object.Commit, *treeFS, error) {
	opts := &git.CloneOptions{URL: g.URL, Auth: auth, CABundle: g.CABundle, NoCheckout: true, Tags: git.NoTags}
	if !g.Pinned() {
		// The ref's whole history, once: the next fetches then bring one
		// commit's new objects. (A shallow clone is cheaper once and dearer
		// every time after: the server cannot count on what a shallow
		// clone holds, and sends the whole tree again; and parsing a
		// 10,000-file pack per push is where the time went. BENCHMARKS.md,
		// "Push to live".)
		opts.ReferenceName, opts.SingleBranch = ref, true
	}
	repo, err := git.CloneContext(ctx, st, nil, opts)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("git: fetch %s %s: %w", Redacted(g.URL), refLabel(ref, g.Ref), explain(err))
	}
	h := want
	if !g.Pinned() {
		// The ref may have moved since it was listed: serve what came.
		if h, err = g.clonedRef(repo, ref); err != nil {
			return nil, nil, nil, err
		}
	}
	commit, err := repo.CommitObject(h)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("git: commit %s is not on %s: %w", h, Redacted(g.URL), err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("git: commit %s: %w", h, err)
	}
	tfs, err := newTreeFS(repo.Storer, tree, g.files)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("git: commit %s: %w", h, err)
	}
	g.files = tfs.Files
	return repo, commit, tfs, nil
}

// clonedRef is the commit ref names in the clone, through an annotated
// tag.
func (g *Git) clonedRef(repo *git.Repository, ref plumbing.ReferenceName) (plumbing.Hash, error) {
	r, err := repo.Reference(ref, true)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("git: fetch %s: %s not in the clone: %w", Redacted(g.URL), ref, err)
	}
	h := r.Hash()
	if tag, err := repo.TagObject(h); err == nil {
		c, err := tag.Commit()
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("git: tag %s: %w", ref, err)
		}
		h = c.Hash
	}
	return h, nil
}

// fetchKept fetches the ref into the kept clone (the new commits, and of
// their trees and blobs only what the clone lacks) and opens it.
func (g *Git) fetchKept(ctx context.Context, auth transport.AuthMethod) (*Checkout, error) {
	k := g.kept
	g.keptFresh++
	spec := gitconfig.RefSpec("+" + string(k.ref) + ":" + string(k.ref))
	err := k.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []gitconfig.RefSpec{spec}, Auth: auth, CABundle: g.CABundle, Tags: git.NoTags, Force: true})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, err
	}
	r, err := k.repo.Reference(k.ref, true)
	if err != nil {
		return nil, err
	}
	h := r.Hash()
	if tag, err := k.repo.TagObject(h); err == nil {
		c, err := tag.Commit()
		if err != nil {
			return nil, err
		}
		h = c.Hash
	}
	commit, err := k.repo.CommitObject(h)
	if err != nil {
		return nil, err
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, err
	}
	tfs, err := newTreeFS(k.repo.Storer, tree, g.files)
	if err != nil {
		return nil, err
	}
	g.files = tfs.Files
	return &Checkout{Commit: commit, FS: tfs, dir: k.dir, store: k.store, kept: true}, nil
}

// dropKept closes and removes the kept clone.
func (g *Git) dropKept() {
	if g.kept == nil {
		return
	}
	g.kept.store.Close()
	os.RemoveAll(g.kept.dir)
	g.kept = nil
}

// CleanWorkDir removes clones a crash left behind.
func (g *Git) CleanWorkDir() {
	old, _ := filepath.Glob(filepath.Join(g.WorkDir, "fetch-*"))
	for _, d := range old {
		os.RemoveAll(d)
	}
}

func refLabel(ref plumbing.ReferenceName, asked string) string {
	if ref != "" {
		return string(ref)
	}
	return asked
}

// explain adds what to do to the errors an operator meets first.
func explain(err error) error {
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return fmt.Errorf("%w: give credentials (--git-password-file, --git-ssh-key)", err)
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("%w: the credentials were refused", err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("%w: check the URL (and that the credentials may read it)", err)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return fmt.Errorf("%w: push a first commit", err)
	}
	return err
}
