package compiler

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"go.yaml.in/yaml/v3"
)

// crdDir holds Tinkerbell's CRDs, unchanged from tinkerbell/tink, in the
// shared folder beside the repository (/work/shared from /work/main).
const crdDir = "../../shared/testdata/tinkerbell-crds"

// crd is one CustomResourceDefinition's v1alpha1 schema.
type crd struct {
	group, version, kind string
	schema               map[string]any
}

func loadCRDs(t *testing.T) map[string]*crd {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if len(files) == 0 {
		abs, _ := filepath.Abs(crdDir)
		t.Skipf("no Tinkerbell CRDs at %s (../shared/testdata/tinkerbell-crds from the repository root): cannot validate the export", abs)
	}
	out := map[string]*crd{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		spec := doc["spec"].(map[string]any)
		c := &crd{group: spec["group"].(string), kind: dig(spec, "names", "kind").(string)}
		for _, v := range spec["versions"].([]any) {
			if dig(v, "name") == "v1alpha1" {
				c.version = "v1alpha1"
				c.schema = dig(v, "schema", "openAPIV3Schema").(map[string]any)
			}
		}
		if c.schema == nil {
			t.Fatalf("%s: no v1alpha1 schema", f)
		}
		out[c.kind] = c
	}
	for _, k := range []string{"Hardware", "Template", "Workflow"} {
		if out[k] == nil {
			t.Fatalf("%s: no CRD of kind %s", crdDir, k)
		}
	}
	return out
}

// validateObject checks a Kubernetes object against its CRD the way the API
// server does with strict field validation: the structural OpenAPI v3
// schema (types, required, properties, additionalProperties, enum,
// pattern, formats, int-or-string, preserve-unknown-fields) and the
// ObjectMeta rules. It returns every violation, with its path.
func validateObject(crds map[string]*crd, obj map[string]any) []string {
	kind, _ := obj["kind"].(string)
	c := crds[kind]
	if c == nil {
		return []string{fmt.Sprintf("kind: %q is not a Tinkerbell kind", obj["kind"])}
	}
	var errs []string
	if want := c.group + "/" + c.version; obj["apiVersion"] != want {
		errs = append(errs, fmt.Sprintf("apiVersion: %v, want %s", obj["apiVersion"], want))
	}
	errs = append(errs, validateMeta(obj["metadata"])...)
	return append(errs, validateSchema("", obj, c.schema)...)
}

var (
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	qualifiedName    = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

func validateMeta(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{"metadata: want an object"}
	}
	var errs []string
	name, _ := m["name"].(string)
	if name == "" || len(name) > 253 || !dns1123Subdomain.MatchString(name) {
		errs = append(errs, fmt.Sprintf("metadata.name: %q is not a DNS-1123 subdomain", m["name"]))
	}
	if ns, ok := m["namespace"]; ok {
		s, _ := ns.(string)
		if len(s) > 63 || !dns1123Label.MatchString(s) {
			errs = append(errs, fmt.Sprintf("metadata.namespace: %q is not a DNS-1123 label", ns))
		}
	}
	validKey := func(k string) bool {
		prefix, name, found := strings.Cut(k, "/")
		if !found {
			name, prefix = prefix, ""
		}
		return (!found || len(prefix) <= 253 && dns1123Subdomain.MatchString(prefix)) && len(name) <= 63 && qualifiedName.MatchString(name)
	}
	for _, field := range []string{"labels", "annotations"} {
		if m[field] == nil {
			continue
		}
		mm, ok := m[field].(map[string]any)
		if !ok {
			errs = append(errs, "metadata."+field+": want a map of strings")
			continue
		}
		for k, v := range mm {
			s, isStr := v.(string)
			switch {
			case !validKey(k):
				errs = append(errs, fmt.Sprintf("metadata.%s: invalid key %q", field, k))
			case !isStr:
				errs = append(errs, fmt.Sprintf("metadata.%s.%s: want a string", field, k))
			case field == "labels" && s != "" && (len(s) > 63 || !qualifiedName.MatchString(s)):
				errs = append(errs, fmt.Sprintf("metadata.labels.%s: invalid value %q", k, s))
			}
		}
	}
	for k := range m {
		if !slices.Contains([]string{"name", "namespace", "labels", "annotations", "generateName", "finalizers", "ownerReferences"}, k) {
			errs = append(errs, fmt.Sprintf("metadata.%s: unknown field", k))
		}
	}
	return errs
}

// validateSchema checks v against an OpenAPI v3 (structural) schema.
func validateSchema(path string, v any, s map[string]any) []string {
	at := func(format string, args ...any) []string {
		p := path
		if p == "" {
			p = "."
		}
		return []string{p + ": " + fmt.Sprintf(format, args...)}
	}
	if v == nil {
		if s["nullable"] == true {
			return nil
		}
		return at("null is not allowed")
	}
	if s["x-kubernetes-int-or-string"] == true {
		switch v.(type) {
		case int, int64, uint64, string:
		default:
			return at("want an integer or a string, got %T", v)
		}
	}
	if alts, ok := s["anyOf"].([]any); ok {
		okOne := false
		for _, alt := range alts {
			if len(validateSchema(path, v, alt.(map[string]any))) == 0 {
				okOne = true
				break
			}
		}
		if !okOne {
			return at("matches none of anyOf")
		}
	}
	var errs []string
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return at("want an object, got %T", v)
		}
		props, _ := s["properties"].(map[string]any)
		addl, hasAddl := s["additionalProperties"].(map[string]any)
		preserve := s["x-kubernetes-preserve-unknown-fields"] == true
		for _, r := range asList(s["required"]) {
			if _, ok := m[r.(string)]; !ok {
				errs = append(errs, at("%s: missing required field", r)...)
			}
		}
		for _, k := range keys(m) {
			child := path + "." + k
			switch {
			case props[k] != nil:
				errs = append(errs, validateSchema(child, m[k], props[k].(map[string]any))...)
			case hasAddl:
				errs = append(errs, validateSchema(child, m[k], addl)...)
			case preserve || props == nil:
				// An object schema with no properties (metadata) or one
				// that keeps unknown fields: anything goes.
			default:
				errs = append(errs, fmt.Sprintf("%s: unknown field%s", child, DidYouMean(k, keys(props))))
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return at("want an array, got %T", v)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range l {
				errs = append(errs, validateSchema(fmt.Sprintf("%s[%d]", path, i), e, items)...)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return at("want a string, got %T (%v)", v, v)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			errs = append(errs, at("%q does not match %s", str, p)...)
		}
		switch s["format"] {
		case "date-time":
			if _, err := time.Parse(time.RFC3339, str); err != nil {
				errs = append(errs, at("%q is not a date-time", str)...)
			}
		case "url":
			if u, err := url.Parse(str); err != nil || u.Scheme == "" || u.Host == "" {
				errs = append(errs, at("%q is not a URL", str)...)
			}
		}
	case "integer":
		switch v.(type) {
		case int, int64, uint64:
		default:
			return at("want an integer, got %T (%v)", v, v)
		}
	case "number":
		switch v.(type) {
		case int, int64, uint64, float64:
		default:
			return at("want a number, got %T (%v)", v, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return at("want a boolean, got %T (%v)", v, v)
		}
	}
	if enum := asList(s["enum"]); len(enum) > 0 && !slices.Contains(enum, v) {
		errs = append(errs, at("%v is not one of %v", v, enum)...)
	}
	return errs
}

func asList(v any) []any { l, _ := v.([]any); return l }

// TestTinkerbellCRDs exports every site of the example repositories, the
// demo repository and the mapping case, and validates every object against
// Tinkerbell's CRDs. Each Template is also rendered for each of its
// Workflows, as Tinkerbell does, and its tasks validated against the
// schema Tinkerbell stores them under (Workflow status.tasks).
func TestTinkerbellCRDs(t *testing.T) {
	crds := loadCRDs(t)
	tasksSchema := dig(crds["Workflow"].schema, "properties", "status", "properties", "tasks").(map[string]any)
	cases := []struct {
		name string
		dir  string // "" is the mapping case
		min  int    // at least this many Hardware objects
	}{
		{"warehouse", "../examples/warehouse", 10},
		{"sites", "../sites", 1},
		{"reservation", "../examples/reservation", 3},
		{"cue-fleet", "../examples/cue-fleet", 0}, // serial numbers only: every node skipped
		{"mapping", "", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tinkPlan(t)
			if tc.dir != "" {
				p = compileFS(t, withStandIns(t, tc.dir))
			}
			hardware := 0
			for _, s := range p.Sites {
				x, err := ExportTinkerbell(p, s.Name, TinkerbellOptions{AutoDisk: "/dev/sda"})
				if err != nil {
					t.Fatal(err)
				}
				docs := map[string]map[string]any{}
				for _, f := range x.Files {
					for _, obj := range yamlDocs(t, f.Path, f.Data) {
						name := fmt.Sprintf("%s %v", obj["kind"], dig(obj, "metadata", "name"))
						if docs[name] != nil {
							t.Errorf("%s/%s: two objects %s", s.Name, f.Path, name)
						}
						docs[name] = obj
						for _, e := range validateObject(crds, obj) {
							t.Errorf("%s/%s: %s: %s", s.Name, f.Path, name, e)
						}
					}
				}
				if len(docs) != x.Hardware+x.Templates+x.Workflows {
					t.Errorf("%s: %d objects in the files, %d counted", s.Name, len(docs), x.Hardware+x.Templates+x.Workflows)
				}
				hardware += x.Hardware
				for name, wf := range docs {
					if wf["kind"] != "Workflow" {
						continue
					}
					hwName := fmt.Sprintf("Hardware %v", dig(wf, "spec", "hardwareRef"))
					tpl := docs[fmt.Sprintf("Template %v", dig(wf, "spec", "templateRef"))]
					if docs[hwName] == nil || tpl == nil {
						t.Errorf("%s: %s refers to a missing Hardware or Template", s.Name, name)
						continue
					}
					hm := map[string]string{}
					for k, v := range dig(wf, "spec", "hardwareMap").(map[string]any) {
						hm[k] = v.(string)
					}
					if hm["device_1"] != dig(docs[hwName], "spec", "interfaces", 0, "dhcp", "mac") {
						t.Errorf("%s: %s: device_1 %q is not its Hardware's first MAC", s.Name, name, hm["device_1"])
					}
					r := renderTemplate(t, dig(tpl, "spec", "data").(string), hm)
					for _, e := range validateSchema("tasks", r["tasks"], tasksSchema) {
						t.Errorf("%s: %s: rendered template: %s", s.Name, name, e)
					}
				}
			}
			if hardware < tc.min {
				t.Errorf("%d Hardware objects exported, want at least %d", hardware, tc.min)
			}
		})
	}
}

// withStandIns reads dir into memory, adding the demo's Micro-OS files
// that `make demo` builds (sites/ refers to them by path).
func withStandIns(t *testing.T, dir string) fs.FS {
	t.Helper()
	fsys := fstest.MapFS{}
	err := fs.WalkDir(os.DirFS(dir), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(filepath.Join(dir, path))
		fsys[path] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"microos/vmlinuz", "microos/initrd.img"} {
		if fsys[f] == nil {
			fsys[f] = &fstest.MapFile{Data: []byte("stand-in")}
		}
	}
	return fsys
}

// TestTinkerbellCRDValidatorRejects proves the validation above can fail:
// objects broken in each way the schemas forbid are rejected, each with
// the path of what is wrong.
func TestTinkerbellCRDValidatorRejects(t *testing.T) {
	crds := loadCRDs(t)
	x, err := ExportTinkerbell(tinkPlan(t), "edge", TinkerbellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]string{}
	for _, f := range x.Files {
		docs := yamlDocs(t, f.Path, f.Data)
		b, _ := yaml.Marshal(docs[0])
		good[docs[0]["kind"].(string)] = string(b)
	}
	fresh := func(kind string) map[string]any {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(good[kind]), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for kind := range good {
		if errs := validateObject(crds, fresh(kind)); len(errs) > 0 {
			t.Fatalf("the unbroken %s is rejected: %v", kind, errs)
		}
	}
	tests := map[string]struct {
		kind    string
		breakIt func(o map[string]any)
		want    string
	}{
		"wrong type, integer as string": {"Hardware", func(o map[string]any) {
			dig(o, "spec", "interfaces", 0, "dhcp").(map[string]any)["lease_time"] = "3600"
		}, ".spec.interfaces[0].dhcp.lease_time: want an integer"},
		"wrong type, boolean as string": {"Hardware", func(o map[string]any) {
			dig(o, "spec", "interfaces", 0, "netboot").(map[string]any)["allowPXE"] = "yes"
		}, ".spec.interfaces[0].netboot.allowPXE: want a boolean"},
		"unknown field in a closed object": {"Hardware", func(o map[string]any) {
			dig(o, "spec", "interfaces", 0, "dhcp").(map[string]any)["macc"] = "x"
		}, `.spec.interfaces[0].dhcp.macc: unknown field (did you mean "mac"?)`},
		"unknown field in spec": {"Workflow", func(o map[string]any) {
			dig(o, "spec").(map[string]any)["template"] = "full"
		}, ".spec.template: unknown field"},
		"missing required field": {"Hardware", func(o map[string]any) {
			dig(o, "spec").(map[string]any)["bmcRef"] = map[string]any{"kind": "Machine"}
		}, ".spec.bmcRef: name: missing required field"},
		"missing required field in a task": {"Workflow", func(o map[string]any) {
			o["status"] = map[string]any{"tasks": []any{map[string]any{"name": "t", "actions": []any{}}}}
		}, ".status.tasks[0]: worker: missing required field"},
		"pattern": {"Hardware", func(o map[string]any) {
			dig(o, "spec", "interfaces", 0, "dhcp").(map[string]any)["mac"] = "52-54-00-0E-00-01"
		}, `.spec.interfaces[0].dhcp.mac: "52-54-00-0E-00-01" does not match`},
		"enum": {"Workflow", func(o map[string]any) {
			dig(o, "spec", "bootOptions").(map[string]any)["bootMode"] = "pxe"
		}, ".spec.bootOptions.bootMode: pxe is not one of [netboot iso]"},
		"additionalProperties type": {"Workflow", func(o map[string]any) {
			dig(o, "spec", "hardwareMap").(map[string]any)["device_2"] = 7
		}, ".spec.hardwareMap.device_2: want a string"},
		"format url": {"Workflow", func(o map[string]any) {
			dig(o, "spec", "bootOptions").(map[string]any)["isoURL"] = "not a url"
		}, `.spec.bootOptions.isoURL: "not a url" is not a URL`},
		"template data not a string": {"Template", func(o map[string]any) {
			dig(o, "spec").(map[string]any)["data"] = map[string]any{"tasks": []any{}}
		}, ".spec.data: want a string"},
		"bad name": {"Hardware", func(o map[string]any) {
			dig(o, "metadata").(map[string]any)["name"] = "Rack1_01"
		}, `metadata.name: "Rack1_01" is not a DNS-1123 subdomain`},
		"wrong apiVersion": {"Template", func(o map[string]any) {
			o["apiVersion"] = "tinkerbell.org/v1"
		}, "apiVersion: tinkerbell.org/v1, want tinkerbell.org/v1alpha1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := fresh(tc.kind)
			tc.breakIt(o)
			errs := validateObject(crds, o)
			if len(errs) == 0 {
				t.Fatalf("the broken %s passes", tc.kind)
			}
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Errorf("errors %q, want one containing %q", errs, tc.want)
			}
		})
	}
}
