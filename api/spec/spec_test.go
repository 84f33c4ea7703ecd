package spec

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/bootops/bootops/api"
)

// The committed api/openapi.json is what the generator makes now.
func TestDocumentUpToDate(t *testing.T) {
	b, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, api.Document()) {
		if os.Getenv("UPDATE") != "" {
			os.WriteFile("../openapi.json", b, 0o644)
		}
		t.Fatal("api/openapi.json is out of date: run 'go generate ./api' and commit it")
	}
}

// The document loads and validates with kin-openapi, as OpenAPI 3.1.
func TestDocumentValidates(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Document())
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := doc.Paths.Len(); n < 25 {
		t.Errorf("%d paths, want every route's", n)
	}
}

// Schemas follow encoding/json: json names, omitempty is optional, nil
// slices are null, embedded structs are promoted.
func TestSchemaOf(t *testing.T) {
	type Inner struct {
		A string `json:"a"`
	}
	type Outer struct {
		Inner
		B    []int     `json:"b"`
		C    int       `json:"c,omitempty"`
		D    time.Time `json:"d,omitzero"`
		E    *Inner    `json:"e,omitempty"`
		Skip string    `json:"-"`
		n    int       //lint:ignore U1000 an unexported field the schema must leave out
	}
	s := newSchemas()
	got := s.of(reflect.TypeFor[Outer]())
	if got["$ref"] != "#/components/schemas/Outer" {
		t.Fatalf("ref %v", got)
	}
	o := s.defs["Outer"].(map[string]any)
	if req := o["required"].([]string); !slices.Equal(req, []string{"a", "b"}) {
		t.Errorf("required %v, want [a b]", req)
	}
	props := o["properties"].(map[string]any)
	if _, ok := props["Skip"]; ok || len(props) != 5 {
		t.Errorf("properties %v", props)
	}
	if b := props["b"].(map[string]any); b["anyOf"] == nil {
		t.Errorf("b (a slice) is not nullable: %v", b)
	}
	if d := props["d"].(map[string]any); d["format"] != "date-time" {
		t.Errorf("d: %v", d)
	}
	if e := props["e"].(map[string]any); e["$ref"] != "#/components/schemas/Inner" {
		t.Errorf("e: %v", e)
	}
}
