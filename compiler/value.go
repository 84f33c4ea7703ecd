package compiler

import (
	"math"
	"strconv"
	"strings"
)

// kind is the type of a value in an object tree.
type kind uint8

const (
	kNull kind = iota
	kBool
	kInt
	kFloat
	kString
	kList
	kMap
)

func (k kind) String() string {
	return [...]string{"null", "bool", "int", "float", "string", "list", "struct"}[k]
}

// value is one node of an object's tree, YAML or CUE alike, with its
// position so every later check can point at the exact line.
type value struct {
	kind kind
	str  string
	// raw is how a YAML number was written, for messages.
	raw  string
	b    bool
	i    int64
	f    float64
	list []*value
	keys []string
	vals []*value
	line int
	col  int
}

func (v *value) get(key string) *value {
	if v == nil || v.kind != kMap {
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.vals[i]
		}
	}
	return nil
}

func (v *value) set(key string, x *value) {
	for i, k := range v.keys {
		if k == key {
			v.vals[i] = x
			return
		}
	}
	v.keys = append(v.keys, key)
	v.vals = append(v.vals, x)
}

// lookup walks a dotted path ("identity.mac") from v.
func (v *value) lookup(path ...string) *value {
	for _, p := range path {
		v = v.get(p)
	}
	return v
}

func (v *value) String() string {
	if v == nil {
		return ""
	}
	switch v.kind {
	case kString:
		return v.str
	case kInt:
		return strconv.FormatInt(v.i, 10)
	case kFloat:
		return strconv.FormatFloat(v.f, 'g', -1, 64)
	case kBool:
		return strconv.FormatBool(v.b)
	}
	return ""
}

func (v *value) strs() []string {
	if v == nil {
		return nil
	}
	if v.kind == kString {
		return []string{v.str}
	}
	var out []string
	for _, e := range v.list {
		out = append(out, e.String())
	}
	return out
}

func (v *value) integer() int {
	if v == nil {
		return 0
	}
	return int(v.i)
}

// number is an int or a float as a float64 (0 when absent).
func (v *value) number() float64 {
	if v == nil {
		return 0
	}
	if v.kind == kFloat {
		return v.f
	}
	return float64(v.i)
}

func (v *value) stringMap() map[string]string {
	if v == nil || len(v.keys) == 0 {
		return nil
	}
	m := make(map[string]string, len(v.keys))
	for i, k := range v.keys {
		m[k] = v.vals[i].String()
	}
	return m
}

// toAny converts v to plain Go values (map[string]any, []any, string,
// int64, float64, bool, nil).
func (v *value) toAny() any {
	switch v.kind {
	case kBool:
		return v.b
	case kInt:
		return v.i
	case kFloat:
		return v.f
	case kString:
		return v.str
	case kList:
		out := make([]any, len(v.list))
		for i, e := range v.list {
			out[i] = e.toAny()
		}
		return out
	case kMap:
		m := make(map[string]any, len(v.keys))
		for i, k := range v.keys {
			m[k] = v.vals[i].toAny()
		}
		return m
	}
	return nil
}

// fromAny converts decoded JSON (as from encoding/json into any) to a value
// at the given position.
func fromAny(x any, line, col int) *value {
	v := &value{line: line, col: col}
	switch t := x.(type) {
	case nil:
	case bool:
		v.kind, v.b = kBool, t
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1<<53 {
			v.kind, v.i = kInt, int64(t)
		} else {
			v.kind, v.f = kFloat, t
		}
	case string:
		v.kind, v.str = kString, t
	case []any:
		v.kind = kList
		for _, e := range t {
			v.list = append(v.list, fromAny(e, line, col))
		}
	case map[string]any:
		v.kind = kMap
		for _, k := range sortedKeys(t) {
			v.keys = append(v.keys, k)
			v.vals = append(v.vals, fromAny(t[k], line, col))
		}
	}
	return v
}

func (v *value) clone() *value {
	c := *v
	if v.list != nil {
		c.list = make([]*value, len(v.list))
		for i, e := range v.list {
			c.list[i] = e.clone()
		}
	}
	if v.keys != nil {
		c.keys = append([]string(nil), v.keys...)
		c.vals = make([]*value, len(v.vals))
		for i, e := range v.vals {
			c.vals[i] = e.clone()
		}
	}
	return &c
}

func joinPath(base, field string) string {
	if base == "" {
		return field
	}
	return base + "." + field
}

func indexPath(base string, i int) string {
	return base + "[" + strconv.Itoa(i) + "]"
}

// describe says what a value is, for messages.
func describe(v *value) string {
	switch v.kind {
	case kString:
		s := v.str
		if len(s) > 60 {
			s = s[:57] + "..."
		}
		return strconv.Quote(s)
	case kList:
		return "a list"
	case kMap:
		return "a struct"
	case kNull:
		return "null"
	case kInt, kFloat:
		if v.raw != "" {
			return v.raw
		}
	}
	return strings.TrimSpace(v.String())
}
