// Package schema embeds the CUE schema of the bootops repository format, the
// single source of truth for it. The compiler unifies CUE objects with it
// directly and validates YAML objects against the definitions CUE exports
// from it (see Definitions); editors get the same definitions as a JSON
// Schema (see JSONSchema).
package schema

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/encoding/openapi"
)

// Filename is the name positions in the schema are reported under.
const Filename = "bootops-schema.cue"

//go:embed bootops.cue
var source []byte

// Kinds are the object kinds a repository holds, each with a definition of
// the same name prefixed by '#'.
var kinds = []string{"MicroOS", "Node", "Profile", "Site"}

// Kinds returns the object kinds in sorted order.
func Kinds() []string { return append([]string(nil), kinds...) }

// Source returns the CUE schema text.
func Source() []byte { return append([]byte(nil), source...) }

// Compile builds the schema in ctx.
func Compile(ctx *cue.Context) (cue.Value, error) {
	v := ctx.CompileBytes(source, cue.Filename(Filename))
	if err := v.Err(); err != nil {
		return v, fmt.Errorf("schema: %w", err)
	}
	return v, nil
}

// Definitions exports every definition of the schema as an OpenAPI 3 schema
// object (a JSON Schema dialect), keyed by definition name without '#'.
func Definitions(v cue.Value) (map[string]json.RawMessage, error) {
	f, err := openapi.Generate(v, &openapi.Config{})
	if err != nil {
		return nil, fmt.Errorf("schema: export definitions: %w", err)
	}
	top := cuecontext.New().BuildFile(f)
	if err := top.Err(); err != nil {
		return nil, fmt.Errorf("schema: export definitions: %w", err)
	}
	b, err := top.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("schema: export definitions: %w", err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("schema: export definitions: %w", err)
	}
	return doc.Components.Schemas, nil
}

// JSONSchema returns a JSON Schema (draft-07) that editors such as
// yaml-language-server use to check repository files while they are typed.
// Every struct of the schema is closed, so every object schema that lists
// properties gets additionalProperties: false; CUE disjunctions become anyOf.
func JSONSchema(v cue.Value) ([]byte, error) {
	defs, err := Definitions(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	names := make([]string, 0, len(defs))
	for name := range defs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var d any
		if err := json.Unmarshal(defs[name], &d); err != nil {
			return nil, err
		}
		out[name] = toJSONSchema(d)
	}
	addRules(out)
	var dispatch []any
	for _, k := range kinds {
		dispatch = append(dispatch, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"kind": map[string]any{"const": k}}, "required": []string{"kind"}},
			"then": map[string]any{"$ref": "#/definitions/" + k},
		})
	}
	doc := map[string]any{
		"$schema":     "http://json-schema.org/draft-07/schema#",
		"$id":         "https://bootops.dev/schema/v1alpha1.json",
		"title":       "bootops repository object (bootops.dev/v1alpha1)",
		"type":        "object",
		"required":    []string{"apiVersion", "kind"},
		"properties":  map[string]any{"kind": map[string]any{"enum": kinds}},
		"allOf":       dispatch,
		"definitions": out,
	}
	return json.MarshalIndent(doc, "", "  ")
}

func toJSONSchema(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			switch k {
			case "$ref":
				s, _ := e.(string)
				const prefix = "#/components/schemas/"
				if len(s) > len(prefix) && s[:len(prefix)] == prefix {
					e = "#/definitions/" + s[len(prefix):]
				}
				m[k] = e
			case "oneOf":
				m["anyOf"] = toJSONSchema(e)
			default:
				m[k] = toJSONSchema(e)
			}
		}
		if props, ok := m["properties"].(map[string]any); ok {
			// A field with a default need not be written.
			if req, ok := m["required"].([]any); ok {
				var keep []any
				for _, r := range req {
					name, _ := r.(string)
					if p, ok := props[name].(map[string]any); ok && p["default"] != nil {
						continue
					}
					keep = append(keep, r)
				}
				if len(keep) == 0 {
					delete(m, "required")
				} else {
					m["required"] = keep
				}
			}
			if _, ok := m["additionalProperties"]; !ok {
				if _, ok := m["allOf"]; !ok {
					m["additionalProperties"] = false
				}
			}
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = toJSONSchema(e)
		}
		return out
	}
	return v
}

// ActionParams lists the parameters each workflow action takes, beside
// the ones every action takes (CommonActionParams).
func ActionParams() map[string][]string {
	return map[string][]string{
		"wipe-disk":     {},
		"image-to-disk": {},
		"write-file":    {"partition", "fsType", "path", "content", "mode"},
		"cloud-init":    {"partition", "fsType", "path"},
		"exec":          {"command", "chroot", "partition", "fsType"},
		"reboot":        {},
		"poweroff":      {},
		"kexec":         {"partition", "fsType"},
		"qa-memory":     {"share"},
		"qa-cpu":        {"duration", "minOpsPerSec"},
		"qa-disk":       {"size", "write", "minReadMBps", "minWriteMBps"},
		"qa-network":    {"size", "minMbps"},
	}
}

// CommonActionParams are the parameters of every action.
func CommonActionParams() []string { return []string{"action", "name", "timeout", "retries"} }

// ActionNeeds lists the parameters an action cannot do without.
func ActionNeeds() map[string][]string {
	return map[string][]string{"write-file": {"path", "content"}, "exec": {"command"}}
}

// kernelLine is a value written on the kernel line of the iPXE script
// (MicroOS cmdline, Profile kernelArgs), as far as a JSON Schema pattern
// (RE2: no look-ahead) says it: no control character, no "${", no word
// that iPXE reads as a command separator (||, &&, ;) or a comment (#…),
// no bootops.* parameter but bootops.debug. The compiler's check says why.
func kernelLine() map[string]any {
	return map[string]any{
		"type":    "string",
		"pattern": `^(?:[^\x00-\x1f\x7f$]|\$+[^\x00-\x1f\x7f${])*\$*$`,
		"not": map[string]any{"anyOf": []any{
			map[string]any{"pattern": `(?:^| )(?:\|\||&&|;)(?: |$)`},
			map[string]any{"pattern": `(?:^| )#`},
			map[string]any{"pattern": `(?:^| )bootops\.(?:$|[^d ]|d(?:$|[^e ]|e(?:$|[^b ]|b(?:$|[^u ]|u(?:$|[^g ]|g[^= ])))))`},
		}},
	}
}

// addRules adds to the exported definitions the rules the compiler checks
// in Go that a JSON Schema can still express, so that an editor refuses
// what bootops validate refuses: a node's identity names at least one
// identifier, a reservation site has a subnet, a site has a server address
// (IPv4, IPv6 or both) and an IPv6-only one no IPv4 setting, an action has
// what it needs
// and only its own parameters, a profile's workflow writes the image, an
// artifact has exactly one of url and path (and a url its sha256), kernel
// command lines hold nothing iPXE would misread. What needs other objects
// (unique names and identifiers, references, addresses inside a subnet)
// cannot be said in JSON Schema.
func addRules(defs map[string]any) {
	obj := func(v any, path ...string) map[string]any {
		m, _ := v.(map[string]any)
		for _, p := range path {
			m, _ = m[p].(map[string]any)
		}
		return m
	}
	req := func(names ...string) map[string]any { return map[string]any{"required": names} }

	if id := obj(defs["Node"], "properties", "identity"); id != nil {
		id["anyOf"] = []any{req("mac"), req("uuid"), req("serial"), req("tpm")}
		if mac := obj(id, "properties", "mac"); mac != nil {
			if alts, ok := mac["anyOf"].([]any); ok {
				for _, a := range alts {
					if m := obj(a); m["type"] == "array" {
						m["minItems"] = 1
					}
				}
			}
		}
	}
	if nw := obj(defs["Site"], "properties", "network"); nw != nil {
		nw["if"] = map[string]any{"properties": map[string]any{"dhcp": map[string]any{"const": "reservation"}}, "required": []string{"dhcp"}}
		nw["then"] = req("subnet")
		nw["anyOf"] = []any{req("serverAddress"), req("ipv6")}
		// IPv6 only: no IPv4 setting.
		nw["allOf"] = []any{map[string]any{
			"if": map[string]any{"not": req("serverAddress")},
			"then": map[string]any{"properties": map[string]any{
				"subnet": false, "gateway": false, "dns": false, "pool": false,
				"dhcp": map[string]any{"not": map[string]any{"const": "reservation"}},
			}},
		}}
	}
	if a := obj(defs["Action"]); a != nil {
		params, needs := ActionParams(), ActionNeeds()
		names := make([]string, 0, len(params))
		for name := range params {
			names = append(names, name)
		}
		sort.Strings(names)
		var rules []any
		for _, name := range names {
			then := map[string]any{"propertyNames": map[string]any{"enum": append(CommonActionParams(), params[name]...)}}
			if n := needs[name]; len(n) > 0 {
				then["required"] = n
			}
			rules = append(rules, map[string]any{
				"if":   map[string]any{"properties": map[string]any{"action": map[string]any{"const": name}}, "required": []string{"action"}},
				"then": then,
			})
		}
		a["allOf"] = rules
	}
	if art := obj(defs["Artifact"]); art != nil {
		art["oneOf"] = []any{req("url"), req("path")}
		art["if"] = req("url")
		art["then"] = req("sha256")
	}
	if m := obj(defs["MicroOS"], "properties"); m != nil {
		c := kernelLine()
		if d, ok := m["cmdline"].(map[string]any); ok && d["default"] != nil {
			c["default"] = d["default"]
		}
		m["cmdline"] = c
	}
	if p := obj(defs["Profile"], "properties"); p != nil {
		if ka := obj(p, "kernelArgs"); ka != nil {
			ka["items"] = kernelLine()
		}
		if wf := obj(p, "workflow"); wf != nil {
			wf["contains"] = map[string]any{"properties": map[string]any{"action": map[string]any{"const": "image-to-disk"}}, "required": []string{"action"}}
		}
	}
}
