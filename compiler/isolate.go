package compiler

import (
	"encoding/json"
	"fmt"
	"io"
)

// Sandbox evaluates a repository's CUE files away from the caller's
// process. CUE is a language: a comprehension can run for hours or take
// all the memory there is, and YAML cannot (its aliases are bounded), so
// CUE is the only part of a compilation a daemon has to fence in. The rest
// of the compilation, and its caches, stay in the caller.
type Sandbox interface {
	// Eval runs EvalWorker on req somewhere it can be stopped (a child
	// process under a deadline and a memory limit) and returns what it
	// wrote. An error means the evaluation did not finish, and says why
	// in words fit for the revision's status.
	Eval(req []byte) ([]byte, error)
}

// wireRequest is what a Sandbox hands EvalWorker: the CUE files.
type wireRequest struct {
	Files []wireFile `json:"files"`
}

type wireFile struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// wireResult is what EvalWorker writes back: the objects and the errors of
// the evaluation, with their positions.
type wireResult struct {
	Objects []wireObject `json:"objects,omitempty"`
	Errors  []Error      `json:"errors,omitempty"`
}

type wireObject struct {
	Kind    string     `json:"kind"`
	Name    string     `json:"name,omitempty"`
	File    string     `json:"file,omitempty"`
	Line    int        `json:"line,omitempty"`
	Col     int        `json:"col,omitempty"`
	Invalid bool       `json:"invalid,omitempty"`
	FromCUE bool       `json:"fromCUE,omitempty"`
	V       *wireValue `json:"v,omitempty"`
}

// wireValue is a value with exported fields; floats go through JSON
// exactly (Go writes the shortest form that reads back the same).
type wireValue struct {
	K    kind         `json:"k"`
	S    string       `json:"s,omitempty"`
	B    bool         `json:"b,omitempty"`
	I    int64        `json:"i,omitempty"`
	F    float64      `json:"f,omitempty"`
	List []*wireValue `json:"l,omitempty"`
	Keys []string     `json:"keys,omitempty"`
	Vals []*wireValue `json:"vals,omitempty"`
	Line int          `json:"line,omitempty"`
	Col  int          `json:"col,omitempty"`
}

// EvalWorker is the Sandbox's side: it reads the CUE files a Sandbox was
// given from r, evaluates them as Compile would, and writes the objects
// and errors to w (the hidden `bootops compile-worker` command).
func (c *Compiler) EvalWorker(r io.Reader, w io.Writer) error {
	var req wireRequest
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return fmt.Errorf("compile worker: read the request: %w", err)
	}
	files := make([]srcFile, len(req.Files))
	for i, f := range req.Files {
		files[i] = srcFile{f.Path, f.Data}
	}
	objs, errs := c.evalCUE(files)
	var res wireResult
	for _, o := range objs {
		res.Objects = append(res.Objects, wireObject{Kind: o.kind, Name: o.name, File: o.file, Line: o.line, Col: o.col, Invalid: o.invalid, FromCUE: o.fromCUE, V: toWire(o.v)})
	}
	for _, e := range errs {
		res.Errors = append(res.Errors, *e)
	}
	return json.NewEncoder(w).Encode(&res)
}

// evalIsolated is evalCUE through the Sandbox. Its error is not a
// compile error: the evaluation did not finish.
func (c *Compiler) evalIsolated(files []srcFile) ([]*object, Errors, error) {
	req := wireRequest{Files: make([]wireFile, len(files))}
	for i, f := range files {
		req.Files[i] = wireFile{f.path, f.data}
	}
	b, err := json.Marshal(&req)
	if err != nil {
		return nil, nil, err
	}
	out, err := c.Sandbox.Eval(b)
	if err != nil {
		return nil, nil, err
	}
	var res wireResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, nil, fmt.Errorf("compile worker: its answer: %w", err)
	}
	objs := make([]*object, 0, len(res.Objects))
	for _, o := range res.Objects {
		objs = append(objs, &object{kind: o.Kind, name: o.Name, file: o.File, line: o.Line, col: o.Col, invalid: o.Invalid, fromCUE: o.FromCUE, v: fromWire(o.V)})
	}
	var errs Errors
	for i := range res.Errors {
		errs = append(errs, &res.Errors[i])
	}
	return objs, errs, nil
}

func toWire(v *value) *wireValue {
	if v == nil {
		return nil
	}
	w := &wireValue{K: v.kind, S: v.str, B: v.b, I: v.i, F: v.f, Keys: v.keys, Line: v.line, Col: v.col}
	for _, x := range v.list {
		w.List = append(w.List, toWire(x))
	}
	for _, x := range v.vals {
		w.Vals = append(w.Vals, toWire(x))
	}
	return w
}

func fromWire(w *wireValue) *value {
	if w == nil {
		return nil
	}
	v := &value{kind: w.K, str: w.S, b: w.B, i: w.I, f: w.F, keys: w.Keys, line: w.Line, col: w.Col}
	if w.List != nil {
		v.list = make([]*value, len(w.List))
		for i, x := range w.List {
			v.list[i] = fromWire(x)
		}
	}
	if w.Vals != nil {
		v.vals = make([]*value, len(w.Vals))
		for i, x := range w.Vals {
			v.vals[i] = fromWire(x)
		}
	}
	return v
}
