package compiler

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	cueast "cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/build"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"github.com/bootops/bootops/schema"
)

// evalCUE evaluates every CUE file of the repository together, with the
// schema's definitions (#Node, #Site, …) in scope, and collects the objects:
// every struct with a "kind" field reached from the top level through
// structs and lists. Each is unified with its kind's definition, so CUE
// itself applies the schema and its defaults.
func (c *Compiler) evalCUE(files []srcFile) ([]*object, Errors) {
	inst, labels, errs := c.parseCUE(files)
	if len(errs) > 0 {
		return nil, errs
	}
	root := c.ctx.BuildInstance(inst, cue.Scope(c.schema))
	if err := root.Err(); err != nil {
		// Report every error, not only the first one Err summarises, then
		// go on with the objects that are not in error themselves.
		if all := root.Validate(); all != nil {
			err = all
		}
		errs = append(errs, c.cueErrors(err, nil)...)
	}
	w := &cueWalk{c: c, errs: errs}
	if root.Err() == nil {
		w.walk(root, 0)
	} else {
		// A struct in error cannot be iterated: reach its fields by the
		// labels written in the files.
		for _, label := range labels {
			w.walk(root.LookupPath(cue.MakePath(cue.Str(label))), 1)
		}
	}
	return w.objs, w.errs
}

// parseCUE parses the files into one instance: one package, no imports
// but the standard library's. It returns the top-level labels the files
// write (neither hidden nor definitions), in order.
func (c *Compiler) parseCUE(files []srcFile) (*build.Instance, []string, Errors) {
	var errs Errors
	inst := build.NewContext().NewInstance("", nil)
	pkg := ""
	var labels []string
	for _, f := range files {
		ast, err := parser.ParseFile(f.path, f.data, parser.ParseComments)
		if err != nil {
			errs = append(errs, c.cueErrors(err, nil)...)
			continue
		}
		name := ast.PackageName()
		if pkg == "" {
			pkg = name
		} else if name != pkg && name != "" {
			errs = append(errs, errorf(Pos{File: f.path, Line: 1, Col: 1}, "", "package %s: every CUE file of the repository must be in one package (found %s first)", name, pkg))
			continue
		}
		if ierrs := cueImports(f.path, ast); len(ierrs) > 0 {
			errs = append(errs, ierrs...)
			continue
		}
		labels = topLabels(ast, labels)
		if err := inst.AddSyntax(ast); err != nil {
			errs = append(errs, c.cueErrors(err, nil)...)
		}
	}
	return inst, labels, errs
}

// cueImports reports each import of file f that is not of the CUE
// standard library.
func cueImports(file string, f *cueast.File) Errors {
	var errs Errors
	for im := range f.ImportSpecs() {
		ip, _ := strconv.Unquote(im.Path.Value)
		if first, _, _ := strings.Cut(ip, "/"); !strings.Contains(first, ".") {
			continue // the CUE standard library: strings, list, math, …
		}
		p := im.Pos()
		errs = append(errs, errorf(Pos{File: file, Line: p.Line(), Col: p.Column()}, "", "import %q: only the CUE standard library can be imported; the schema's definitions (#Node, #Site, #Profile, #MicroOS) are in scope", ip))
	}
	return errs
}

// topLabels appends to labels the top-level regular field names of f not
// already in it.
func topLabels(f *cueast.File, labels []string) []string {
	for _, d := range f.Decls {
		if fd, ok := d.(*cueast.Field); ok {
			if name, _, err := cueast.LabelName(fd.Label); err == nil && !strings.HasPrefix(name, "_") && !strings.HasPrefix(name, "#") && !slices.Contains(labels, name) {
				labels = append(labels, name)
			}
		}
	}
	return labels
}

// cueWalk collects the objects of an evaluated instance: every struct
// with a "kind" field reached through structs and lists.
type cueWalk struct {
	c    *Compiler
	objs []*object
	errs Errors
}

func (w *cueWalk) walk(v cue.Value, depth int) {
	if depth > 32 || depth > 0 && v.Err() != nil {
		return
	}
	switch v.IncompleteKind() {
	case cue.StructKind:
		if k := v.LookupPath(cue.ParsePath("kind")); k.Exists() {
			o, e := w.c.cueObject(v, k)
			w.errs = append(w.errs, e...)
			if o != nil {
				w.objs = append(w.objs, o)
			}
			return
		}
		it, err := v.Fields()
		if err != nil {
			w.errs = append(w.errs, w.c.cueErrors(err, nil)...)
			return
		}
		for it.Next() {
			w.walk(it.Value(), depth+1)
		}
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			w.errs = append(w.errs, w.c.cueErrors(err, nil)...)
			return
		}
		for it.Next() {
			w.walk(it.Value(), depth+1)
		}
	}
}

func (c *Compiler) cueObject(v, k cue.Value) (*object, Errors) {
	pos := cuePos(v.Pos())
	kind, err := k.String()
	if err != nil {
		return nil, Errors{errorf(cuePos(k.Pos()), "kind", "want a concrete string (one of %s)", strings.Join(schema.Kinds(), ", "))}
	}
	if !slices.Contains(schema.Kinds(), kind) {
		return nil, Errors{errorf(cuePos(k.Pos()), "kind", "unknown kind %q: want one of %s%s", kind, strings.Join(schema.Kinds(), ", "), DidYouMean(kind, schema.Kinds()))}
	}
	def := c.schema.LookupPath(cue.MakePath(cue.Def(kind)))
	u := def.Unify(v)
	if err := u.Validate(cue.Concrete(true), cue.Final()); err != nil {
		o := &object{kind: kind, file: pos.File, invalid: true}
		if n, e := v.LookupPath(cue.ParsePath("name")).String(); e == nil {
			o.name = n
		}
		errs := c.cueErrors(err, &pos)
		// Unifying with the definition roots paths at "#Kind": show where
		// the object is instead.
		for _, e := range errs {
			if rest, ok := strings.CutPrefix(e.Path, "#"+kind); ok {
				e.Path = v.Path().String() + rest
			}
		}
		return o, errs
	}
	tree := cueToValue(u, pos)
	o := &object{kind: kind, file: pos.File, v: tree, line: pos.Line, col: pos.Col, fromCUE: true}
	o.name = tree.get("name").String()
	return o, nil
}

// cueToValue converts a concrete CUE value into a value tree with positions;
// values the schema supplied get the object's position.
func cueToValue(v cue.Value, fallback Pos) *value {
	if d, ok := v.Default(); ok {
		v = d
	}
	p := cuePos(v.Pos())
	if p.File == "" || p.File == schema.Filename {
		p = fallback
	}
	out := &value{line: p.Line, col: p.Col}
	switch v.Kind() {
	case cue.BoolKind:
		out.kind = kBool
		out.b, _ = v.Bool()
	case cue.IntKind:
		out.kind = kInt
		out.i, _ = v.Int64()
	case cue.FloatKind, cue.NumberKind:
		out.kind = kFloat
		out.f, _ = v.Float64()
	case cue.StringKind:
		out.kind = kString
		out.str, _ = v.String()
	case cue.ListKind:
		out.kind = kList
		it, _ := v.List()
		for it.Next() {
			out.list = append(out.list, cueToValue(it.Value(), p))
		}
	case cue.StructKind:
		out.kind = kMap
		it, _ := v.Fields()
		for it.Next() {
			out.keys = append(out.keys, it.Selector().Unquoted())
			out.vals = append(out.vals, cueToValue(it.Value(), p))
		}
	}
	return out
}

func cuePos(p token.Pos) Pos {
	if !p.IsValid() {
		return Pos{}
	}
	return Pos{File: p.Filename(), Line: p.Line(), Col: p.Column()}
}

// cueErrors converts CUE errors into positioned Errors. Of an error's
// positions, the last one inside the repository is the most specific (the
// value, after the place it was unified); the schema's are never shown.
// Disjunction summaries without a position of their own are dropped when
// their details are there.
func (c *Compiler) cueErrors(err error, fallback *Pos) Errors {
	list := cueerrors.Errors(err)
	var out Errors
	for _, e := range list {
		var pos Pos
		for _, p := range cueerrors.Positions(e) {
			pp := cuePos(p)
			if pp.File == "" || pp.File == schema.Filename {
				continue
			}
			if pos.File == "" || pp.Line > pos.Line || pp.Line == pos.Line && pp.Col > pos.Col {
				pos = pp
			}
		}
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		if pos.File == "" && len(list) > 1 && strings.Contains(msg, "errors in empty disjunction") {
			continue
		}
		if pos.File == "" && fallback != nil {
			pos = *fallback
		}
		if pos.File == "" {
			pos = Pos{File: schema.Filename}
		}
		path := e.Path()
		if msg == "field not allowed" && len(path) > 0 {
			msg += DidYouMean(path[len(path)-1], c.fieldNames())
		}
		out = append(out, &Error{Pos: pos, Path: strings.Join(path, "."), Msg: strings.TrimSuffix(msg, ":")})
	}
	return out
}

// fieldNames lists every field the schema declares, for hints.
func (c *Compiler) fieldNames() []string {
	seen := map[string]bool{}
	for _, r := range c.vd.defs {
		var add func(r *rule)
		add = func(r *rule) {
			for k, p := range r.props {
				seen[k] = true
				add(p)
			}
		}
		add(r)
	}
	return sortedKeys(seen)
}
