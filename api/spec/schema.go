package spec

import (
	"fmt"
	"path"
	"reflect"
	"strings"
	"time"
	"unicode"
)

// schemas makes JSON schemas (2020-12, as OpenAPI 3.1 has them) of Go
// types by reflection, the way encoding/json encodes them: a struct's
// properties are its json names, a field without omitempty or omitzero
// is required, a nil slice or map is null. Each named struct becomes a
// component, referred to by $ref.
type schemas struct {
	defs  map[string]any
	names map[reflect.Type]string
}

func newSchemas() *schemas {
	return &schemas{defs: map[string]any{}, names: map[reflect.Type]string{}}
}

var timeType = reflect.TypeFor[time.Time]()

// prefixed are the packages whose types' names say little alone
// (power.Answer, swarm.Reply): their components are named with the
// package's in front (PowerAnswer, SwarmReply).
var prefixed = map[string]bool{"power": true, "swarm": true}

// of is the schema of a value of type t.
func (s *schemas) of(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return obj("type", "string", "format", "date-time")
	case t == reflect.TypeFor[time.Duration]():
		return obj("type", "integer", "description", "nanoseconds")
	}
	switch t.Kind() {
	case reflect.Pointer:
		return s.of(t.Elem())
	case reflect.String:
		return obj("type", "string")
	case reflect.Bool:
		return obj("type", "boolean")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return obj("type", "integer")
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return obj("type", "integer", "minimum", 0)
	case reflect.Float32, reflect.Float64:
		return obj("type", "number")
	case reflect.Interface:
		return obj() // any JSON value
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return obj("type", "string", "contentEncoding", "base64")
		}
		return obj("type", "array", "items", s.of(t.Elem()))
	case reflect.Map:
		return obj("type", "object", "additionalProperties", s.of(t.Elem()))
	case reflect.Struct:
		if t.Name() == "" {
			return s.object(t)
		}
		return ref(s.component(t))
	}
	panic(fmt.Sprintf("spec: no JSON schema for Go type %s", t))
}

// component names t's schema among the components, defining it the
// first time; a name two packages share gets its package's in front
// (PlanMachine).
func (s *schemas) component(t reflect.Type) string {
	if name, ok := s.names[t]; ok {
		return name
	}
	name := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return -1
	}, t.Name())
	if _, taken := s.defs[name]; taken || prefixed[path.Base(t.PkgPath())] {
		pkg := path.Base(t.PkgPath())
		name = strings.ToUpper(pkg[:1]) + pkg[1:] + name
	}
	s.names[t] = name
	s.defs[name] = nil // taken, while its fields are made (a type may refer to itself)
	s.defs[name] = s.object(t)
	return name
}

// object is a struct's schema: its fields as encoding/json writes them.
func (s *schemas) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	s.fields(t, props, &required)
	o := obj("type", "object", "properties", props)
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

func (s *schemas) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				s.fields(et, props, required) // promoted, as encoding/json does
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		optional := hasOpt(opts, "omitempty") || hasOpt(opts, "omitzero")
		var p map[string]any
		switch {
		case hasOpt(opts, "string"):
			p = obj("type", "string")
		case !optional && nullable(f.Type):
			// A nil slice, map or pointer is written as null.
			p = obj("anyOf", []any{s.of(f.Type), obj("type", "null")})
		default:
			p = s.of(f.Type)
		}
		props[name] = p
		if !optional {
			*required = append(*required, name)
		}
	}
}

func nullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Interface, reflect.Slice:
		// An interface too: kin-openapi's validator takes the schema {}
		// for one that refuses null, where JSON Schema takes anything.
		return true
	}
	return false
}

func hasOpt(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// obj is a JSON object from keys and values, in pairs.
func obj(kv ...any) map[string]any {
	m := make(map[string]any, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func ref(name string) map[string]any { return obj("$ref", "#/components/schemas/"+name) }
