// Package diff finds the breaking changes between two versions of an
// OpenAPI document (make api-diff): what a client written against the
// old one may trip on when it talks to a server of the new one.
package diff

import (
	"fmt"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Breaking lists the changes from base to head that break a client of
// base, sorted: a path or operation removed, a response code removed, a
// parameter or request property newly required, a request body newly
// required, a response property removed, a type changed.
func Breaking(base, head *openapi3.T) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for path, bItem := range base.Paths.Map() {
		hItem := head.Paths.Value(path)
		if hItem == nil {
			add("%s: path removed", path)
			continue
		}
		hOps := hItem.Operations()
		for method, b := range bItem.Operations() {
			h := hOps[method]
			where := method + " " + path
			if h == nil {
				add("%s: operation removed", where)
				continue
			}
			operation(where, b, h, add)
		}
	}
	slices.Sort(out)
	return out
}

func operation(where string, b, h *openapi3.Operation, add func(string, ...any)) {
	// Parameters: one now required that was not, or of another type.
	for _, hp := range h.Parameters {
		p := hp.Value
		var bp *openapi3.Parameter
		if old := b.Parameters.GetByInAndName(p.In, p.Name); old != nil {
			bp = old
		}
		if p.Required && (bp == nil || !bp.Required) {
			add("%s: %s parameter %s newly required", where, p.In, p.Name)
		}
		if bp != nil && bp.Schema != nil && p.Schema != nil {
			if bt, ht := types(bp.Schema.Value), types(p.Schema.Value); !slices.Equal(bt, ht) {
				add("%s: %s parameter %s changed type from %s to %s", where, p.In, p.Name, join(bt), join(ht))
			}
		}
	}
	// The request body.
	if h.RequestBody != nil && h.RequestBody.Value != nil {
		hb := h.RequestBody.Value
		var bb *openapi3.RequestBody
		if b.RequestBody != nil {
			bb = b.RequestBody.Value
		}
		if hb.Required && (bb == nil || !bb.Required) {
			add("%s: request body newly required", where)
		}
		if bb != nil {
			for mime, hm := range hb.Content {
				if bm := bb.Content[mime]; bm != nil && bm.Schema != nil && hm.Schema != nil {
					compare(where+": request "+mime, bm.Schema.Value, hm.Schema.Value, true, map[[2]*openapi3.Schema]bool{}, add)
				}
			}
		}
	}
	// Responses: every code stays, with every media type and property.
	hResps := h.Responses.Map()
	for code, br := range b.Responses.Map() {
		hr := hResps[code]
		if hr == nil {
			add("%s: response %s removed", where, code)
			continue
		}
		for mime, bm := range br.Value.Content {
			hm := hr.Value.Content[mime]
			if hm == nil {
				add("%s: response %s: media type %s removed", where, code, mime)
				continue
			}
			if bm.Schema != nil && hm.Schema != nil {
				compare(fmt.Sprintf("%s: response %s %s", where, code, mime), bm.Schema.Value, hm.Schema.Value, false, map[[2]*openapi3.Schema]bool{}, add)
			}
		}
	}
}

// compare walks two versions of a schema: a request's (a property newly
// required breaks) or a response's (a property removed breaks); a type
// changed breaks both.
func compare(where string, b, h *openapi3.Schema, request bool, seen map[[2]*openapi3.Schema]bool, add func(string, ...any)) {
	if b == nil || h == nil || seen[[2]*openapi3.Schema{b, h}] {
		return
	}
	seen[[2]*openapi3.Schema{b, h}] = true
	if bt, ht := types(b), types(h); len(bt) > 0 && len(ht) > 0 && !slices.Equal(bt, ht) {
		add("%s: type changed from %s to %s", where, join(bt), join(ht))
		return
	}
	bp, hp := properties(b), properties(h)
	bReq, hReq := required(b), required(h)
	for name, hs := range hp {
		bs, was := bp[name]
		if request && slices.Contains(hReq, name) && !slices.Contains(bReq, name) {
			add("%s: property %s newly required", where, name)
		}
		if was {
			compare(where+"."+name, bs, hs, request, seen, add)
		}
	}
	if !request {
		for name := range bp {
			if _, ok := hp[name]; !ok {
				add("%s: property %s removed", where, name)
			}
		}
	}
	if bi, hi := items(b), items(h); bi != nil && hi != nil {
		compare(where+"[]", bi, hi, request, seen, add)
	}
}

// branches are s and the schemas its anyOf, oneOf and allOf combine (a
// nullable field is anyOf [its schema, null]).
func branches(s *openapi3.Schema) []*openapi3.Schema {
	out := []*openapi3.Schema{s}
	for _, refs := range []openapi3.SchemaRefs{s.AnyOf, s.OneOf, s.AllOf} {
		for _, r := range refs {
			if r.Value != nil {
				out = append(out, branches(r.Value)...)
			}
		}
	}
	return out
}

// types are the JSON types a schema allows, sorted ("" none said).
func types(s *openapi3.Schema) []string {
	var ts []string
	for _, x := range branches(s) {
		if x.Type != nil {
			for _, t := range *x.Type {
				if !slices.Contains(ts, t) {
					ts = append(ts, t)
				}
			}
		}
	}
	slices.Sort(ts)
	return ts
}

func properties(s *openapi3.Schema) map[string]*openapi3.Schema {
	m := map[string]*openapi3.Schema{}
	for _, x := range branches(s) {
		for name, r := range x.Properties {
			if r.Value != nil {
				m[name] = r.Value
			}
		}
	}
	return m
}

func required(s *openapi3.Schema) []string {
	var r []string
	for _, x := range branches(s) {
		r = append(r, x.Required...)
	}
	return r
}

func items(s *openapi3.Schema) *openapi3.Schema {
	for _, x := range branches(s) {
		if x.Items != nil && x.Items.Value != nil {
			return x.Items.Value
		}
	}
	return nil
}

func join(ts []string) string { return strings.Join(ts, "|") }
