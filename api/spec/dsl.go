package spec

import (
	"net/http"
	"reflect"
	"strconv"
)

// op is one operation, written compactly; build turns it into OpenAPI.
type op struct {
	method, path string
	id, tag      string
	summary      string
	desc         string
	// security lists the alternatives, each a scheme's name; "" is
	// "no credential" (the credential is optional).
	security []string
	params   []param
	body     *content // the request body, required when set
	resps    []resp
	// hub marks the operations the hub serves too (behind its view token).
	hub bool
}

type param struct {
	in, name, desc string
	required       bool
	schema         map[string]any
}

// content is a body: its media type and schema (a Go type's, or a map).
type content struct {
	mime   string
	schema any
}

type resp struct {
	code    int
	desc    string
	bodies  []content
	headers map[string]string // name → description (a string header)
}

// t is a Go type's schema placeholder, resolved when the document is built.
func t[T any]() reflect.Type { return reflect.TypeFor[T]() }

func query(name, desc string) param { return param{in: "query", name: name, desc: desc} }
func queryS(name, desc string, schema map[string]any) param {
	return param{in: "query", name: name, desc: desc, schema: schema}
}
func pathP(name, desc string) param {
	return param{in: "path", name: name, desc: desc, required: true}
}
func header(name, desc string) param { return param{in: "header", name: name, desc: desc} }

func jsonBody(schema any) *content { return &content{"application/json", schema} }

// ok is a 200 with one body.
func ok(desc, mime string, schema any) resp {
	return resp{code: http.StatusOK, desc: desc, bodies: []content{{mime, schema}}}
}

func jsonResp(code int, desc string, schema any) resp {
	return resp{code: code, desc: desc, bodies: []content{{"application/json", schema}}}
}

// text is a plain-text response (a script, a message).
func text(code int, desc string) resp {
	return resp{code: code, desc: desc, bodies: []content{{"text/plain", obj("type", "string")}}}
}

// fail is an error: http.Error's plain-text message, which says what
// went wrong.
func fail(code int, desc string) resp { return text(code, desc) }

// noBody is a response without a body.
func noBody(code int, desc string) resp { return resp{code: code, desc: desc} }

func (r resp) with(name, desc string) resp {
	h := map[string]string{}
	for k, v := range r.headers {
		h[k] = v
	}
	h[name] = desc
	r.headers = h
	return r
}

var str = obj("type", "string")

func enum(values ...string) map[string]any {
	vs := make([]any, len(values))
	for i, v := range values {
		vs[i] = v
	}
	return obj("type", "string", "enum", vs)
}

// operation is o as an OpenAPI operation object.
func (o op) operation(s *schemas) map[string]any {
	out := obj("operationId", o.id, "summary", o.summary, "tags", []string{o.tag})
	if o.desc != "" {
		out["description"] = o.desc
	}
	if len(o.security) > 0 {
		var alts []any
		for _, name := range o.security {
			if name == "" {
				alts = append(alts, obj())
			} else {
				alts = append(alts, obj(name, []string{}))
			}
		}
		out["security"] = alts
	}
	if len(o.params) > 0 {
		var ps []any
		for _, p := range o.params {
			schema := p.schema
			if schema == nil {
				schema = str
			}
			ps = append(ps, obj("in", p.in, "name", p.name, "description", p.desc, "required", p.required, "schema", schema))
		}
		out["parameters"] = ps
	}
	if o.body != nil {
		out["requestBody"] = obj("required", true, "content", obj(o.body.mime, obj("schema", s.schema(o.body.schema))))
	}
	responses := obj()
	for _, r := range o.resps {
		ro := obj("description", r.desc)
		if len(r.bodies) > 0 {
			c := obj()
			for _, b := range r.bodies {
				if b.schema == nil {
					c[b.mime] = obj()
				} else {
					c[b.mime] = obj("schema", s.schema(b.schema))
				}
			}
			ro["content"] = c
		}
		if len(r.headers) > 0 {
			h := obj()
			for name, desc := range r.headers {
				h[name] = obj("description", desc, "schema", str)
			}
			ro["headers"] = h
		}
		responses[strconv.Itoa(r.code)] = ro
	}
	out["responses"] = responses
	return out
}

// schema resolves a body's schema: a Go type's by reflection, else the
// map as it is.
func (s *schemas) schema(v any) map[string]any {
	switch v := v.(type) {
	case reflect.Type:
		return s.of(v)
	case map[string]any:
		return v
	}
	panic("spec: a schema is a reflect.Type or a map")
}
