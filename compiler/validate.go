package compiler

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
)

// validator checks value trees against the definitions CUE exports from the
// schema (schema.Definitions) and fills in the schema's defaults. It is the
// fast path for YAML objects: a differential test proves its verdicts and
// defaults identical to unifying the same objects with the CUE schema.
type validator struct {
	defs map[string]*rule
	// byPattern finds the definition an inlined pattern came from, for
	// its description.
	byPattern map[string]string
}

// rule is one compiled schema node.
type rule struct {
	desc     string // the definition's doc comment
	ref      string
	typ      string
	enum     []*value
	pattern  *regexp.Regexp
	min, max *float64
	props    map[string]*rule
	required map[string]bool
	addl     *rule
	items    *rule
	tuple    []*rule
	anyOf    []*rule
	allOf    []*rule
	def      *value
}

type rawRule struct {
	Ref         string                     `json:"$ref"`
	Description string                     `json:"description"`
	Type        string                     `json:"type"`
	Enum        []any                      `json:"enum"`
	Pattern     string                     `json:"pattern"`
	Minimum     *float64                   `json:"minimum"`
	Maximum     *float64                   `json:"maximum"`
	Properties  map[string]json.RawMessage `json:"properties"`
	Required    []string                   `json:"required"`
	Addl        json.RawMessage            `json:"additionalProperties"`
	Items       json.RawMessage            `json:"items"`
	OneOf       []json.RawMessage          `json:"oneOf"`
	AnyOf       []json.RawMessage          `json:"anyOf"`
	AllOf       []json.RawMessage          `json:"allOf"`
	Default     json.RawMessage            `json:"default"`
}

func newValidator(defs map[string]json.RawMessage) (*validator, error) {
	v := &validator{defs: map[string]*rule{}, byPattern: map[string]string{}}
	for name, raw := range defs {
		r, err := compileRule(raw)
		if err != nil {
			return nil, fmt.Errorf("definition %s: %w", name, err)
		}
		v.defs[name] = r
		if r.pattern != nil && r.desc != "" {
			v.byPattern[r.pattern.String()] = r.desc
		}
	}
	return v, nil
}

func compileRule(raw json.RawMessage) (*rule, error) {
	var rr rawRule
	if err := json.Unmarshal(raw, &rr); err != nil {
		return nil, err
	}
	r := &rule{ref: strings.TrimPrefix(rr.Ref, "#/components/schemas/"), desc: rr.Description, typ: rr.Type, min: rr.Minimum, max: rr.Maximum}
	for _, e := range rr.Enum {
		r.enum = append(r.enum, fromAny(e, 0, 0))
	}
	if rr.Pattern != "" {
		re, err := regexp.Compile(rr.Pattern)
		if err != nil {
			return nil, err
		}
		r.pattern = re
	}
	if rr.Properties != nil {
		r.props = map[string]*rule{}
		for _, k := range sortedKeys(rr.Properties) {
			p, err := compileRule(rr.Properties[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			r.props[k] = p
		}
	}
	if len(rr.Required) > 0 {
		r.required = map[string]bool{}
		for _, k := range rr.Required {
			r.required[k] = true
		}
	}
	var err error
	if len(rr.Addl) > 0 && string(rr.Addl) != "false" && string(rr.Addl) != "true" {
		if r.addl, err = compileRule(rr.Addl); err != nil {
			return nil, err
		}
	}
	if len(rr.Items) > 0 {
		if rr.Items[0] == '[' {
			var list []json.RawMessage
			if err := json.Unmarshal(rr.Items, &list); err != nil {
				return nil, err
			}
			for _, e := range list {
				x, err := compileRule(e)
				if err != nil {
					return nil, err
				}
				r.tuple = append(r.tuple, x)
			}
		} else if r.items, err = compileRule(rr.Items); err != nil {
			return nil, err
		}
	}
	for _, list := range [][]json.RawMessage{rr.OneOf, rr.AnyOf} {
		for _, e := range list {
			x, err := compileRule(e)
			if err != nil {
				return nil, err
			}
			r.anyOf = append(r.anyOf, x)
		}
	}
	for _, e := range rr.AllOf {
		x, err := compileRule(e)
		if err != nil {
			return nil, err
		}
		r.allOf = append(r.allOf, x)
	}
	if len(rr.Default) > 0 {
		var d any
		if err := json.Unmarshal(rr.Default, &d); err != nil {
			return nil, err
		}
		r.def = fromAny(d, 0, 0)
	}
	return r, nil
}

// problem is one schema violation, relative to the object.
type problem struct {
	path string
	line int
	col  int
	msg  string
}

// check validates v against definition def, filling defaults, and returns
// every problem.
func (vd *validator) check(def string, v *value) []problem {
	r := vd.defs[def]
	if r == nil {
		return []problem{{msg: "no schema definition #" + def}}
	}
	var out []problem
	vd.walk(r, v, "", true, &out)
	return out
}

// resolve follows $ref.
func (vd *validator) resolve(r *rule) *rule {
	for r.ref != "" {
		t := vd.defs[r.ref]
		if t == nil {
			return r
		}
		r = t
	}
	return r
}

// walk checks v against r. With fill, missing fields with defaults are
// added; without, v is left untouched (used to try disjunction branches).
// The steps: a disjunction's branches, then every allOf, then v itself (its
// type and value), then what it holds.
func (vd *validator) walk(r *rule, v *value, path string, fill bool, out *[]problem) {
	named := r
	r = vd.resolve(r)
	if len(r.anyOf) > 0 && !vd.walkAnyOf(r, v, path, fill, out) {
		return
	}
	for _, a := range r.allOf {
		vd.walk(a, v, path, fill, out)
	}
	if msg := vd.valueProblem(r, named, v); msg != "" {
		*out = append(*out, problem{path: path, line: v.line, col: v.col, msg: msg})
		return
	}
	switch v.kind {
	case kList:
		vd.walkList(r, v, path, fill, out)
	case kMap:
		vd.walkMap(r, v, path, fill, out)
	}
}

// walkAnyOf checks v against r's alternatives. When one accepts v (filled,
// with fill) it reports true and the walk goes on with the rest of r;
// otherwise it reports the problems of the alternative that fits best, or
// that v is none of them, and returns false.
func (vd *validator) walkAnyOf(r *rule, v *value, path string, fill bool, out *[]problem) bool {
	var sameKind [][]problem
	for _, b := range r.anyOf {
		var p []problem
		vd.walk(b, v, path, false, &p)
		if len(p) == 0 {
			if fill {
				vd.walk(b, v, path, true, out)
			}
			return true
		}
		if vd.kindMatches(b, v) {
			sameKind = append(sameKind, p)
		}
	}
	// One alternative is of the value's type: its problems are the
	// precise ones (mac[1] is not a MAC rather than "not a list of …").
	// A fixed-length list is only ever the literal default.
	if len(sameKind) > 1 {
		var general [][]problem
		for _, b := range r.anyOf {
			if vd.kindMatches(b, v) && !vd.isTuple(b) {
				var p []problem
				vd.walk(b, v, path, false, &p)
				general = append(general, p)
			}
		}
		if len(general) == 1 {
			sameKind = general
		}
	}
	if len(sameKind) == 1 {
		*out = append(*out, sameKind[0]...)
		return false
	}
	var alts []string
	for _, b := range r.anyOf {
		alts = append(alts, vd.expect(b))
	}
	*out = append(*out, problem{path: path, line: v.line, col: v.col,
		msg: fmt.Sprintf("%s is not %s", describe(v), strings.Join(alts, " or "))})
	return false
}

// valueProblem says what is wrong with v itself against r (named is r
// before $ref was followed, for the description): its type, then the
// allowed values, the pattern and the bounds, the first that fails. It
// returns "" when v passes them all.
func (vd *validator) valueProblem(r, named *rule, v *value) string {
	if msg := typeProblem(r.typ, v); msg != "" {
		return msg
	}
	if msg := enumProblem(r.enum, v); msg != "" {
		return msg
	}
	if r.pattern != nil && v.kind == kString && !r.pattern.MatchString(v.str) {
		return fmt.Sprintf("%s is not %s", describe(v), vd.expect(named))
	}
	return boundsProblem(r, v)
}

// typeProblem says why v is not of the JSON Schema type typ ("" if it is,
// or if typ says nothing).
func typeProblem(typ string, v *value) string {
	switch typ {
	case "string":
		if v.kind != kString {
			if v.raw != "" || v.kind == kBool {
				return fmt.Sprintf("want a string, got %s: YAML reads it as %s, quote it (%q)", describe(v), map[kind]string{kInt: "an integer", kFloat: "a number", kBool: "a boolean"}[v.kind], yamlText(v))
			}
			return fmt.Sprintf("want a string, got %s", describe(v))
		}
	case "integer":
		if v.kind != kInt {
			return fmt.Sprintf("want an integer, got %s", describe(v))
		}
	case "number":
		if v.kind != kInt && v.kind != kFloat {
			return fmt.Sprintf("want a number, got %s", describe(v))
		}
	case "boolean":
		if v.kind != kBool {
			return fmt.Sprintf("want true or false, got %s", describe(v))
		}
	case "array":
		if v.kind != kList {
			return fmt.Sprintf("want a list, got %s", describe(v))
		}
	case "object":
		if v.kind != kMap {
			return fmt.Sprintf("want a struct, got %s", describe(v))
		}
	}
	return ""
}

// enumProblem says why v is none of the allowed values enum, with a
// suggestion for a misspelt string ("" if v is one, or enum is empty).
func enumProblem(enum []*value, v *value) string {
	if len(enum) == 0 {
		return ""
	}
	for _, e := range enum {
		if equalScalar(e, v) {
			return ""
		}
	}
	var opts []string
	for _, e := range enum {
		opts = append(opts, describe(e))
	}
	msg := fmt.Sprintf("%s is not allowed: want %s", describe(v), orList(opts))
	if v.kind == kString {
		var names []string
		for _, e := range enum {
			names = append(names, e.str)
		}
		msg += DidYouMean(v.str, names)
	}
	return msg
}

// boundsProblem says why a number v is outside r's minimum and maximum
// ("" if it is inside, or is not a number).
func boundsProblem(r *rule, v *value) string {
	if v.kind != kInt && v.kind != kFloat {
		return ""
	}
	n := float64(v.i)
	if v.kind == kFloat {
		n = v.f
	}
	if r.min != nil && n < *r.min {
		return fmt.Sprintf("%s is less than the minimum %s", describe(v), fmtNum(*r.min))
	}
	if r.max != nil && n > *r.max {
		return fmt.Sprintf("%s is more than the maximum %s", describe(v), fmtNum(*r.max))
	}
	return ""
}

// walkList checks a list's elements: against a fixed-length list's own
// rule each, or all against the items rule.
func (vd *validator) walkList(r *rule, v *value, path string, fill bool, out *[]problem) {
	switch {
	case r.tuple != nil:
		if len(v.list) != len(r.tuple) {
			*out = append(*out, problem{path: path, line: v.line, col: v.col,
				msg: fmt.Sprintf("want a list of %d, got %d", len(r.tuple), len(v.list))})
			return
		}
		for i, e := range v.list {
			vd.walk(r.tuple[i], e, indexPath(path, i), fill, out)
		}
	case r.items != nil:
		for i, e := range v.list {
			vd.walk(r.items, e, indexPath(path, i), fill, out)
		}
	}
}

// walkMap checks a struct's fields, then its missing ones.
func (vd *validator) walkMap(r *rule, v *value, path string, fill bool, out *[]problem) {
	props, required := vd.fields(r)
	if props != nil || r.addl != nil {
		vd.walkFields(props, r.addl, v, path, fill, out)
	}
	vd.missingFields(props, required, v, path, fill, out)
}

// walkFields checks each field of v against its property, or against addl
// for a name props does not know; a field neither allows is unknown.
func (vd *validator) walkFields(props map[string]*rule, addl *rule, v *value, path string, fill bool, out *[]problem) {
	for i, k := range v.keys {
		p := props[k]
		if p == nil {
			p = addl
		}
		if p == nil {
			e := v.vals[i]
			*out = append(*out, problem{path: joinPath(path, k), line: e.line, col: e.col,
				msg: "unknown field" + DidYouMean(k, sortedKeys(props))})
			continue
		}
		vd.walk(p, v.vals[i], joinPath(path, k), fill, out)
	}
}

// missingFields handles the properties v does not set: with fill, one with
// a default gets it (with its own defaults); a required one without a
// default is a problem.
func (vd *validator) missingFields(props map[string]*rule, required map[string]bool, v *value, path string, fill bool, out *[]problem) {
	for _, k := range sortedKeys(props) {
		if v.get(k) != nil {
			continue
		}
		// A default sits on the property or on the definition it names.
		def := vd.resolve(props[k]).def
		if def == nil {
			def = props[k].def
		}
		switch {
		case def != nil:
			if fill {
				// The default's own fields get their defaults too.
				d := def.clone()
				setPos(d, v.line, v.col)
				var discard []problem
				vd.walk(props[k], d, joinPath(path, k), true, &discard)
				v.set(k, d)
			}
		case required[k]:
			*out = append(*out, problem{path: joinPath(path, k), line: v.line, col: v.col, msg: "missing required field"})
		}
	}
}

// isTuple reports whether r is a fixed-length list (a literal default).
func (vd *validator) isTuple(r *rule) bool {
	r = vd.resolve(r)
	if r.tuple != nil {
		return true
	}
	for _, a := range r.allOf {
		if vd.isTuple(a) {
			return true
		}
	}
	return false
}

// kindMatches reports whether r asks for v's type (without looking at
// anything else).
func (vd *validator) kindMatches(r *rule, v *value) bool {
	r = vd.resolve(r)
	switch r.typ {
	case "string":
		return v.kind == kString
	case "integer":
		return v.kind == kInt
	case "number":
		return v.kind == kInt || v.kind == kFloat
	case "boolean":
		return v.kind == kBool
	case "array":
		return v.kind == kList
	case "object":
		return v.kind == kMap
	}
	if len(r.enum) > 0 {
		return r.enum[0].kind == v.kind
	}
	switch {
	case r.items != nil || r.tuple != nil:
		return v.kind == kList
	case r.props != nil || r.addl != nil:
		return v.kind == kMap
	}
	for _, a := range r.allOf {
		if vd.kindMatches(a, v) {
			return true
		}
	}
	return false
}

// fields collects the properties and required names of r and its allOf.
func (vd *validator) fields(r *rule) (map[string]*rule, map[string]bool) {
	if len(r.allOf) == 0 {
		return r.props, r.required
	}
	props := map[string]*rule{}
	req := map[string]bool{}
	var add func(x *rule)
	add = func(x *rule) {
		x = vd.resolve(x)
		for k, p := range x.props {
			if _, ok := props[k]; !ok {
				props[k] = p
			}
		}
		for k := range x.required {
			req[k] = true
		}
		for _, a := range x.allOf {
			add(a)
		}
	}
	add(r)
	return props, req
}

// expect describes what a rule wants, for messages: a definition's doc
// comment when there is one.
func (vd *validator) expect(r *rule) string {
	if r.ref != "" {
		t := vd.resolve(r)
		if t.desc != "" {
			return t.desc
		}
		return "a valid " + r.ref
	}
	switch {
	case r.pattern != nil:
		if d := vd.byPattern[r.pattern.String()]; d != "" {
			return d
		}
		return "a string matching " + r.pattern.String()
	case len(r.enum) > 0:
		var opts []string
		for _, e := range r.enum {
			opts = append(opts, describe(e))
		}
		return orList(opts)
	case r.typ == "array":
		if r.items != nil {
			return "a list of " + strings.TrimPrefix(strings.TrimPrefix(vd.expect(r.items), "a "), "an ")
		}
		return "a list"
	case r.typ != "":
		return "a " + r.typ
	}
	return "valid"
}

func setPos(v *value, line, col int) {
	v.line, v.col = line, col
	for _, e := range v.list {
		setPos(e, line, col)
	}
	for _, e := range v.vals {
		setPos(e, line, col)
	}
}

func equalScalar(a, b *value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case kString:
		return a.str == b.str
	case kInt:
		return a.i == b.i
	case kFloat:
		return a.f == b.f
	case kBool:
		return a.b == b.b
	case kNull:
		return true
	}
	return false
}

func fmtNum(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%g", f)
}

func orList(opts []string) string {
	switch len(opts) {
	case 0:
		return "nothing"
	case 1:
		return opts[0]
	}
	sort.Strings(opts)
	return "one of " + strings.Join(opts, ", ")
}

// yamlText is how a scalar was written.
func yamlText(v *value) string {
	if v.raw != "" {
		return v.raw
	}
	return v.String()
}
