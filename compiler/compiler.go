package compiler

import (
	"crypto/sha256"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/schema"
)

// Compiler compiles repositories. It keeps a cache of parsed and validated
// files keyed by path and content, so a daemon that recompiles after every
// change only does the work for what changed. A Compiler is safe for
// concurrent use; compilations run one at a time.
type Compiler struct {
	mu     sync.Mutex
	ctx    *cue.Context
	schema cue.Value
	vd     *validator

	yaml map[cacheKey]*fileResult
	// stat remembers the size and mtime each file had when its content was
	// last read, so an unchanged file is not read again (as git's index
	// does); a file whose size or mtime moved is read and keyed by content.
	stat map[string]*statEntry
	// listing and ignore are the last walk's result, for CompileChanged.
	listing []listed
	listed  map[string]bool
	ignore  ignore
	cue     struct {
		key  [32]byte
		objs []*object
		errs Errors
		ok   bool
	}
	renders renderCache
	// last is the last Plan compiled without errors, for CompileChanged's
	// fast path.
	last    *lastGood
	patched int // compilations the fast path did, for tests
	index   index
	gen     uint64
	// Workers is how many files are parsed at once (default GOMAXPROCS).
	Workers int
	// Sandbox, when set, evaluates the CUE files (when they changed)
	// instead of this process: a daemon sets it so a revision cannot stall
	// or exhaust it. A compilation whose evaluation did not finish fails
	// with the Sandbox's error, not an Errors.
	Sandbox Sandbox
}

type cacheKey struct {
	path string
	sum  [32]byte
}

type statEntry struct {
	size, mtime int64
	key         cacheKey
	gen         uint64
}

type fileResult struct {
	objs []*object
	errs Errors
	gen  uint64 // the last compilation that used it
}

// object is one repository object, validated, with the schema's defaults.
type object struct {
	kind, name string
	file       string
	line, col  int
	v          *value
	fromCUE    bool
	// invalid objects failed the schema: they are only kept so references
	// to them do not cascade into more errors.
	invalid bool
	// claims and nodeFacts cache what a Node says of itself.
	claims    []claim
	nodeFacts *nodeFacts
}

func (o *object) pos(path ...string) Pos {
	v := o.v.lookup(path...)
	if v == nil || v.line == 0 {
		return Pos{File: o.file, Line: o.line, Col: o.col}
	}
	return Pos{File: o.file, Line: v.line, Col: v.col}
}

func (o *object) str(path ...string) string { return o.v.lookup(path...).String() }

// maxObjectErrors bounds the errors reported for one object: past that,
// the rest are counted, so a pathological file cannot flood the output.
const maxObjectErrors = 50

// New returns a Compiler for the embedded schema.
func New() (*Compiler, error) {
	ctx := cuecontext.New()
	sv, err := schema.Compile(ctx)
	if err != nil {
		return nil, err
	}
	defs, err := schema.Definitions(sv)
	if err != nil {
		return nil, err
	}
	vd, err := newValidator(defs)
	if err != nil {
		return nil, err
	}
	return &Compiler{ctx: ctx, schema: sv, vd: vd, yaml: map[cacheKey]*fileResult{}, stat: map[string]*statEntry{}}, nil
}

// Compile loads, validates and renders the repository in fsys. On invalid
// input the error is an Errors holding every problem, sorted.
func (c *Compiler) Compile(fsys fs.FS) (*plan.Plan, error) {
	return c.compile(fsys, nil, nil)
}

// Stats counts a repository's objects.
type Stats struct {
	Sites, Nodes, Profiles, MicroOS int
}

// Check validates the repository in fsys as Compile does, without
// rendering anything: every error Compile would report, for less work.
func (c *Compiler) Check(fsys fs.FS) (Stats, error) {
	var st Stats
	_, err := c.compile(fsys, nil, &st)
	return st, err
}

// CompileChanged is Compile for a caller that knows which paths changed
// since its last compilation of the same fsys (a file watcher, a Git diff):
// changed must name every file or folder modified, added or removed. Files
// not named are taken from the cache without a stat, and the tree is walked
// only when a folder, a symlink or .bootopsignore changed.
func (c *Compiler) CompileChanged(fsys fs.FS, changed []string) (*plan.Plan, error) {
	set := make(map[string]bool, len(changed))
	for _, p := range changed {
		set[path.Clean(strings.TrimPrefix(p, "./"))] = true
	}
	return c.compile(fsys, set, nil)
}

func (c *Compiler) compile(fsys fs.FS, changed map[string]bool, stats *Stats) (*plan.Plan, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if changed != nil && stats == nil {
		if p := c.patch(fsys, changed); p != nil {
			return p, nil
		}
	}
	c.last = nil
	objs, errs, err := c.load(fsys, changed)
	if err != nil {
		return nil, err
	}
	if stats != nil {
		// Checking renders nothing: the render cache is left as it is.
		_, _, errs = assemble(objs, fsys, nil, &c.index, errs, stats)
		if len(errs) > 0 {
			return nil, errs.sort()
		}
		return nil, nil
	}
	c.renders.begin()
	p, r, errs := assemble(objs, fsys, &c.renders, &c.index, errs, nil)
	c.renders.end()
	if len(errs) > 0 {
		return nil, errs.sort()
	}
	// The kept repo outlives this compilation's files: a Git snapshot's
	// object store must not stay reachable through it.
	r.fsys = nil
	c.last = newLastGood(p, r, objs)
	return p, nil
}

// load reads, parses and validates every file: the listing, then the YAML
// files (cached ones taken, the rest parsed in parallel) while the CUE files
// are evaluated on this goroutine, then the cache is brought up to date.
func (c *Compiler) load(fsys fs.FS, changed map[string]bool) ([]*object, Errors, error) {
	listing, errs := c.list(fsys, changed)
	yamlFiles, cuePaths := splitByLanguage(listing)
	c.gen++
	b := c.cachedYAML(yamlFiles, changed)
	wait := c.readYAML(fsys, b)
	cueObjs, cueErrs, err := c.loadCUE(fsys, cuePaths)
	wait()
	if err != nil {
		return nil, nil, err
	}
	errs = append(errs, cueErrs...)
	c.remember(b)
	objs, errs, used := b.collect(errs)
	c.evict(used)
	return append(objs, cueObjs...), errs, nil
}

// list returns the repository's files: the last listing brought up to date
// when the caller named what changed, else a walk of the tree.
func (c *Compiler) list(fsys fs.FS, changed map[string]bool) ([]listed, Errors) {
	var listing []listed
	var errs Errors
	ok := false
	if changed != nil && c.listing != nil {
		listing, ok = updateListing(fsys, c.listing, c.listed, c.ignore, changed)
	}
	if !ok {
		// Sizes and mtimes only matter when there is a cache to check them
		// against: a first compilation records them as it reads.
		listing, c.ignore, errs = listFiles(fsys, changed == nil && len(c.stat) > 0)
		c.listed = make(map[string]bool, len(listing))
		for _, l := range listing {
			c.listed[l.path] = true
		}
	}
	// A listing with errors is walked again next time, so its errors
	// are reported again.
	c.listing = nil
	if len(errs) == 0 {
		c.listing = listing
	}
	return listing, errs
}

// splitByLanguage separates the CUE files, evaluated together, from the
// YAML files, each parsed on its own.
func splitByLanguage(listing []listed) (yamlFiles []listed, cuePaths []string) {
	for _, l := range listing {
		if path.Ext(l.path) == ".cue" {
			cuePaths = append(cuePaths, l.path)
		} else {
			yamlFiles = append(yamlFiles, l)
		}
	}
	return yamlFiles, cuePaths
}

// yamlBatch is one compilation's YAML files, by index in files: each one's
// result, its cache key (empty when it could not be read) and, for a file
// read this time, what it was when read.
type yamlBatch struct {
	files   []listed
	results []*fileResult
	keys    []cacheKey
	infos   []fs.FileInfo
	misses  []int // the files the cache did not answer, to be read
}

// cachedYAML takes, in one pass, what the cache holds for files that did
// not change (by size and mtime, or by the caller's word), and marks those
// entries used by this compilation; the rest are the batch's misses.
func (c *Compiler) cachedYAML(files []listed, changed map[string]bool) *yamlBatch {
	b := &yamlBatch{
		files:   files,
		results: make([]*fileResult, len(files)),
		keys:    make([]cacheKey, len(files)),
	}
	for i, l := range files {
		st := c.stat[l.path]
		unchanged := st != nil && l.mtime != 0 && st.size == l.size && st.mtime == l.mtime
		if changed != nil {
			unchanged = st != nil && !changed[l.path]
		}
		if unchanged {
			if r := c.yaml[st.key]; r != nil {
				st.gen, r.gen = c.gen, c.gen
				b.keys[i], b.results[i] = st.key, r
				continue
			}
		}
		b.misses = append(b.misses, i)
	}
	b.infos = make([]fs.FileInfo, len(files))
	return b
}

// readYAML reads, parses and validates the batch's misses on Workers
// goroutines, keyed by content (a file that only moved, or came back, is
// still found in the cache). It returns at once; the returned func waits
// for the work to finish. Until then the caller must not write c.yaml.
func (c *Compiler) readYAML(fsys fs.FS, b *yamlBatch) (wait func()) {
	workers := c.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	next := make(chan int, len(b.misses))
	for _, i := range b.misses {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(workers, len(b.misses)) {
		wg.Go(func() {
			for i := range next {
				b.results[i] = c.readOneYAML(fsys, b, i)
			}
		})
	}
	return wg.Wait
}

// readOneYAML is one worker's step for the batch's file i.
func (c *Compiler) readOneYAML(fsys fs.FS, b *yamlBatch, i int) *fileResult {
	p := b.files[i].path
	data, info, e := readFile(fsys, p)
	if e != nil {
		return &fileResult{errs: Errors{e}}
	}
	key := cacheKey{p, sha256.Sum256(data)}
	b.keys[i], b.infos[i] = key, info
	// c.yaml is only read here; it is written after the wait.
	if r := c.yaml[key]; r != nil {
		return r
	}
	return c.loadYAML(p, data)
}

// loadCUE reads the CUE files and evaluates them together, on this
// goroutine (a cue.Context is not safe for concurrent use); the result is
// kept and reused while the files' paths and contents stay the same. The
// error is the Sandbox's, when the evaluation did not finish.
func (c *Compiler) loadCUE(fsys fs.FS, paths []string) ([]*object, Errors, error) {
	if len(paths) == 0 {
		return nil, nil, nil
	}
	var errs Errors
	var files []srcFile
	h := sha256.New()
	for _, p := range paths {
		data, _, e := readFile(fsys, p)
		if e != nil {
			errs = append(errs, e)
			continue
		}
		files = append(files, srcFile{p, data})
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write(data)
		h.Write([]byte{0})
	}
	var key [32]byte
	copy(key[:], h.Sum(nil))
	if !c.cue.ok || c.cue.key != key {
		var objs []*object
		var cerrs Errors
		if c.Sandbox != nil && len(files) > 0 {
			var err error
			if objs, cerrs, err = c.evalIsolated(files); err != nil {
				// Nothing is cached: the next compilation evaluates
				// again (a fixed revision, or a larger limit).
				return nil, nil, err
			}
		} else {
			objs, cerrs = c.evalCUE(files)
		}
		c.cue.objs, c.cue.errs = objs, cerrs
		c.cue.key, c.cue.ok = key, true
	}
	return c.cue.objs, append(errs, c.cue.errs...), nil
}

// remember records in the cache what the batch read, with the size and
// mtime each file had when read.
func (c *Compiler) remember(b *yamlBatch) {
	for _, i := range b.misses {
		if b.keys[i].path == "" {
			continue
		}
		b.results[i].gen = c.gen
		c.yaml[b.keys[i]] = b.results[i]
		c.stat[b.keys[i].path] = &statEntry{size: b.infos[i].Size(), mtime: b.infos[i].ModTime().UnixNano(), key: b.keys[i], gen: c.gen}
	}
}

// collect returns the batch's objects and, after errs, its errors, in the
// files' order; used counts the files that have a cache entry.
func (b *yamlBatch) collect(errs Errors) (objs []*object, _ Errors, used int) {
	objs = make([]*object, 0, len(b.results))
	for i, r := range b.results {
		objs = append(objs, r.objs...)
		errs = append(errs, r.errs...)
		if b.keys[i].path != "" {
			used++
		}
	}
	return objs, errs, used
}

// evict keeps only the cache entries this compilation used (used of them),
// so the cache stays bounded by the repository.
func (c *Compiler) evict(used int) {
	if len(c.yaml) != used {
		for k, r := range c.yaml {
			if r.gen != c.gen {
				delete(c.yaml, k)
			}
		}
	}
	if len(c.stat) != used {
		for k, st := range c.stat {
			if st.gen != c.gen {
				delete(c.stat, k)
			}
		}
	}
}

// loadYAML parses one YAML file and validates each document against the
// schema (the fast path).
func (c *Compiler) loadYAML(file string, data []byte) *fileResult {
	docs, errs := parseYAML(file, data)
	r := &fileResult{errs: errs}
	if len(errs) > 0 {
		return r
	}
	if len(docs) == 0 {
		r.errs = append(r.errs, errorf(Pos{File: file, Line: 1, Col: 1}, "", "empty file: no objects"))
		return r
	}
	for _, d := range docs {
		pos := Pos{File: file, Line: d.line, Col: d.col}
		if d.root == nil {
			r.errs = append(r.errs, errorf(pos, "", "empty document (a stray '---'?)"))
			continue
		}
		o, e := c.yamlObject(file, d.root)
		r.errs = append(r.errs, e...)
		if o != nil {
			r.objs = append(r.objs, o)
		}
	}
	return r
}

func (c *Compiler) yamlObject(file string, root *value) (*object, Errors) {
	pos := Pos{File: file, Line: root.line, Col: root.col}
	if root.kind != kMap {
		return nil, Errors{errorf(pos, "", "want an object (a struct with apiVersion, kind and name), got %s", describe(root))}
	}
	kinds := schema.Kinds()
	k := root.get("kind")
	switch {
	case k == nil:
		hint := ""
		if root.get("apiVersion") == nil {
			hint = " (not a bootops object? list the file in .bootopsignore)"
		}
		return nil, Errors{errorf(pos, "kind", "missing required field: want one of %s%s", strings.Join(kinds, ", "), hint)}
	case k.kind != kString || !slices.Contains(kinds, k.str):
		msg := "unknown kind " + describe(k) + ": want one of " + strings.Join(kinds, ", ")
		if k.kind == kString {
			msg += DidYouMean(k.str, kinds)
		}
		return nil, Errors{errorf(Pos{File: file, Line: k.line, Col: k.col}, "kind", "%s", msg)}
	}
	var errs Errors
	probs := c.vd.check(k.str, root)
	for i, p := range probs {
		if i == maxObjectErrors {
			errs = append(errs, errorf(Pos{File: file, Line: root.line, Col: root.col}, "", "and %d more errors in this object", len(probs)-i))
			break
		}
		errs = append(errs, &Error{Pos: Pos{File: file, Line: p.line, Col: p.col}, Path: p.path, Msg: p.msg})
	}
	if len(errs) > 0 {
		name := root.get("name")
		if name == nil || name.kind != kString {
			return nil, errs
		}
		return &object{kind: k.str, name: name.str, file: file, invalid: true}, errs
	}
	return &object{kind: k.str, name: root.get("name").String(), file: file, line: root.line, col: root.col, v: root}, nil
}
