package diff

import (
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/bootops/bootops/api"
)

const base = `{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {
 "/a": {"get": {"parameters": [{"in": "query", "name": "q", "schema": {"type": "string"}}],
   "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/A"}}}},
                 "404": {"description": "no"}}}},
 "/b": {"get": {"responses": {"200": {"description": "ok"}}}},
 "/c": {"post": {"requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}},
   "responses": {"200": {"description": "ok"}}}, "get": {"responses": {"200": {"description": "ok"}}}}},
 "components": {"schemas": {"A": {"type": "object", "required": ["x"], "properties": {
   "x": {"type": "string"}, "y": {"type": "integer"},
   "z": {"anyOf": [{"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}}, {"type": "null"}]}}}}}}`

const head = `{"openapi": "3.1.0", "info": {"title": "t", "version": "2"}, "paths": {
 "/a": {"get": {"parameters": [{"in": "query", "name": "q", "required": true, "schema": {"type": "string"}}],
   "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/A"}}}}}}},
 "/c": {"post": {"requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["m"], "properties": {"n": {"type": "integer"}, "m": {"type": "string"}}}}}},
   "responses": {"200": {"description": "ok"}, "201": {"description": "new"}}}},
 "/d": {"get": {"responses": {"200": {"description": "new"}}}}},
 "components": {"schemas": {"A": {"type": "object", "required": ["x"], "properties": {
   "x": {"type": "integer"}, "new": {"type": "string"},
   "z": {"anyOf": [{"type": "array", "items": {"type": "object", "properties": {}}}, {"type": "null"}]}}}}}}`

func load(t *testing.T, s string) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestBreaking(t *testing.T) {
	got := Breaking(load(t, base), load(t, head))
	want := []string{
		"/b: path removed",
		"GET /a: query parameter q newly required",
		"GET /a: response 200 application/json.x: type changed from string to integer",
		"GET /a: response 200 application/json.z[]: property k removed",
		"GET /a: response 200 application/json: property y removed",
		"GET /a: response 404 removed",
		"GET /c: operation removed",
		"POST /c: request application/json: property m newly required",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%q\nwant:\n%q", got, want)
	}
	// Growing is no break: the other way round, only what head removed
	// from base's view shows (a new path, code or property does not).
	for _, c := range Breaking(load(t, head), load(t, base)) {
		if c == "/d: path removed" || c == "POST /c: response 201 removed" {
			continue
		}
		if c == "GET /a: query parameter q newly required" || c == "POST /c: request application/json: property m newly required" {
			t.Errorf("relaxing is not a break: %s", c)
		}
	}
}

// The API's own document has no break from itself.
func TestSelf(t *testing.T) {
	doc := load(t, string(api.Document()))
	if got := Breaking(doc, doc); len(got) > 0 {
		t.Errorf("%q", got)
	}
}
