package interop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	crvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// crdDir holds Tinkerbell's CRDs, unchanged from tinkerbell/tink, with
// their license and where they came from (SOURCE).
const crdDir = "testdata/tinkerbell-crds"

// crd is one CustomResourceDefinition's v1alpha1 schema, made ready by the
// API server's own code.
type crd struct {
	group, version, kind string
	namespaced           bool
	structural           *structuralschema.Structural
	validator            crvalidation.SchemaValidator
}

func loadCRDs(t *testing.T) map[string]*crd {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if len(files) == 0 {
		abs, _ := filepath.Abs(crdDir)
		t.Fatalf("no Tinkerbell CRDs at %s: cannot validate the export", abs)
	}
	out := map[string]*crd{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var def apiextensionsv1.CustomResourceDefinition
		if err := sigsyaml.UnmarshalStrict(data, &def); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		c := &crd{group: def.Spec.Group, kind: def.Spec.Names.Kind, namespaced: def.Spec.Scope == apiextensionsv1.NamespaceScoped}
		for _, v := range def.Spec.Versions {
			if v.Name != "v1alpha1" || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			// The API server works on the internal types: convert as it does.
			var in apiextensions.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &in, nil); err != nil {
				t.Fatalf("%s: convert: %v", f, err)
			}
			s, err := structuralschema.NewStructural(&in)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if errs := structuralschema.ValidateStructural(nil, s); len(errs) > 0 {
				t.Fatalf("%s: not a structural schema: %v", f, errs.ToAggregate())
			}
			validator, _, err := crvalidation.NewSchemaValidator(&in)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			c.version, c.structural, c.validator = v.Name, s, validator
		}
		if c.structural == nil {
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

// kubeDocs splits a multi-document YAML file and converts each document to
// JSON the way kubectl apply does (sigs.k8s.io/yaml: YAML 1.1 scalars), then
// decodes it as the API server does (integers int64, other numbers
// float64).
func kubeDocs(t *testing.T, name string, data []byte) []map[string]any {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		j, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(j) == "null" {
			continue // the empty document before the first ---
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(j, &obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs = append(docs, obj)
	}
}

// asJSON is v as the API server holds it: a fresh copy through JSON.
func asJSON(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, utiljson.Unmarshal(b, &out)
}

// validateObject runs what the API server runs on a custom resource it is
// asked to create with strict field validation (kubectl apply's default),
// with Kubernetes' own code: the type check of apiVersion and kind, the
// metadata decoded strictly into ObjectMeta and validated
// (ValidateObjectMeta: name, namespace, labels, annotation size),
// pruning (a field it would drop is an error, not a silent loss),
// defaulting, then the OpenAPI schema validation (ValidateCustomResource:
// types, required, enum, pattern, formats, int-or-string). It returns every
// violation, with its path; obj is not changed.
func validateObject(crds map[string]*crd, in map[string]any) []string {
	obj, err := asJSON(in)
	if err != nil {
		return []string{err.Error()}
	}
	kind, _ := obj["kind"].(string)
	c := crds[kind]
	if c == nil {
		return []string{fmt.Sprintf("kind: %q is not a Tinkerbell kind", obj["kind"])}
	}
	var errs field.ErrorList
	if want := c.group + "/" + c.version; obj["apiVersion"] != want {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), obj["apiVersion"], "must be "+want))
	}
	meta, found, unknownMeta, err := schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(field.NewPath("metadata"), obj["metadata"], err.Error()))
	case !found:
		errs = append(errs, field.Required(field.NewPath("metadata"), ""))
	default:
		errs = append(errs, metavalidation.ValidateObjectMeta(meta, c.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	}
	unknown := append(unknownMeta, pruning.PruneWithOptions(obj, c.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	var out []string
	for _, p := range unknown {
		out = append(out, fmt.Sprintf("unknown field %q", p))
	}
	defaulting.Default(obj, c.structural)
	errs = append(errs, crvalidation.ValidateCustomResource(nil, obj, c.validator)...)
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// TestTinkerbellCRDs exports every site of the example repositories, the
// demo repository, the mapping case and a repository of the longest names
// bootops's schema allows, and has Kubernetes' own code validate every
// object against Tinkerbell's CRDs. Each Template is also rendered for each
// of its Workflows, as Tinkerbell does, and its tasks validated where
// Tinkerbell stores them (Workflow status.tasks).
func TestTinkerbellCRDs(t *testing.T) {
	crds := loadCRDs(t)
	cases := []struct {
		name string
		fsys func(t *testing.T) fs.FS // nil is the mapping case
		min  int                      // at least this many Hardware objects
	}{
		{"warehouse", dirFS("../examples/warehouse"), 10},
		{"sites", dirFS("../sites"), 1},
		{"reservation", dirFS("../examples/reservation"), 3},
		{"cue-fleet", dirFS("../examples/cue-fleet"), 0}, // serial numbers only: every node skipped
		{"mapping", nil, 2},
		{"longest names", longNames, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tinkPlan(t)
			if tc.fsys != nil {
				p = compileFS(t, tc.fsys(t))
			}
			hardware := 0
			for _, s := range p.Sites {
				x, err := ExportTinkerbell(p, s.Name, TinkerbellOptions{AutoDisk: "/dev/sda"})
				if err != nil {
					t.Fatal(err)
				}
				docs := map[string]map[string]any{}
				for _, f := range x.Files {
					for _, obj := range kubeDocs(t, f.Path, f.Data) {
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
					withTasks, err := asJSON(wf)
					if err != nil {
						t.Fatal(err)
					}
					withTasks["status"] = map[string]any{"tasks": r["tasks"]}
					for _, e := range validateObject(crds, withTasks) {
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

func dirFS(dir string) func(t *testing.T) fs.FS {
	return func(t *testing.T) fs.FS { return withStandIns(t, dir) }
}

// longNames is a repository whose site, profile and node names are as long
// as bootops's schema lets them be (#Name: a DNS-1123 label, 63
// characters): the names, labels and references the export derives from
// them must still be ones Kubernetes takes.
func longNames(t *testing.T) fs.FS {
	fsys := fstest.MapFS{}
	for _, f := range txtarFiles(t, baseTxtar) {
		fsys[f.Name] = &fstest.MapFile{Data: f.Data}
	}
	site := "s" + strings.Repeat("-site", 12) + "-9"          // 63
	profile := "p" + strings.Repeat("-profile", 7) + "-prof9" // 63
	fsys["profiles/long.yaml"] = &fstest.MapFile{Data: []byte(`apiVersion: bootops.dev/v1alpha1
kind: Profile
name: ` + profile + `
os:
  type: immutable
image:
  url: http://198.18.0.1/images/base.raw.gz
  sha256: 3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c
disk: /dev/sda
`)}
	fsys["sites/"+site+"/site.yaml"] = &fstest.MapFile{Data: []byte(`apiVersion: bootops.dev/v1alpha1
kind: Site
name: ` + site + `
network:
  serverAddress: 198.18.0.1
defaultProfile: ` + profile + `
`)}
	var nodes []string
	for i := range 2 {
		name := strings.Repeat("n", 61) + fmt.Sprintf("%02d", i)
		nodes = append(nodes, fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: %s\nidentity:\n  mac: 52:54:00:00:63:%02d\n", name, i))
	}
	fsys["sites/"+site+"/nodes/nodes.yaml"] = &fstest.MapFile{Data: []byte(strings.Join(nodes, "---\n"))}
	for _, n := range []string{site, profile} {
		if len(n) != 63 {
			t.Fatalf("%s: %d characters, want 63", n, len(n))
		}
	}
	return fsys
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
// objects broken in each way the schemas and the ObjectMeta rules forbid
// are rejected by Kubernetes' code, each with the path of what is wrong.
func TestTinkerbellCRDValidatorRejects(t *testing.T) {
	crds := loadCRDs(t)
	x, err := ExportTinkerbell(tinkPlan(t), "edge", TinkerbellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]map[string]any{}
	for _, f := range x.Files {
		docs := kubeDocs(t, f.Path, f.Data)
		good[docs[0]["kind"].(string)] = docs[0]
	}
	fresh := func(kind string) map[string]any {
		m, err := asJSON(good[kind])
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for kind := range good {
		if errs := validateObject(crds, fresh(kind)); len(errs) > 0 {
			t.Fatalf("the unbroken %s is rejected: %v", kind, errs)
		}
	}
	set := func(o map[string]any, path []any, k string, v any) {
		dig(o, path...).(map[string]any)[k] = v
	}
	tests := map[string]struct {
		kind    string
		breakIt func(o map[string]any)
		want    string
	}{
		"wrong type, integer as string": {"Hardware", func(o map[string]any) {
			set(o, []any{"spec", "interfaces", 0, "dhcp"}, "lease_time", "3600")
		}, `spec.interfaces[0].dhcp.lease_time: Invalid value: "string": spec.interfaces[0].dhcp.lease_time in body must be of type integer: "string"`},
		"wrong type, boolean as string": {"Hardware", func(o map[string]any) {
			set(o, []any{"spec", "interfaces", 0, "netboot"}, "allowPXE", "yes")
		}, `spec.interfaces[0].netboot.allowPXE: Invalid value: "string": spec.interfaces[0].netboot.allowPXE in body must be of type boolean: "string"`},
		"unknown field in a closed object": {"Hardware", func(o map[string]any) {
			set(o, []any{"spec", "interfaces", 0, "dhcp"}, "macc", "x")
		}, `unknown field "spec.interfaces[0].dhcp.macc"`},
		"unknown field in spec": {"Workflow", func(o map[string]any) {
			set(o, []any{"spec"}, "template", "full")
		}, `unknown field "spec.template"`},
		"unknown field in metadata": {"Template", func(o map[string]any) {
			set(o, []any{"metadata"}, "label", map[string]any{"a": "b"})
		}, `unknown field "metadata.label"`},
		"missing required field": {"Hardware", func(o map[string]any) {
			set(o, []any{"spec"}, "bmcRef", map[string]any{"kind": "Machine"})
		}, "spec.bmcRef.name: Required value"},
		"missing required field in a task": {"Workflow", func(o map[string]any) {
			o["status"] = map[string]any{"tasks": []any{map[string]any{"name": "t", "actions": []any{}}}}
		}, "status.tasks[0].worker: Required value"},
		"pattern": {"Hardware", func(o map[string]any) {
			set(o, []any{"spec", "interfaces", 0, "dhcp"}, "mac", "52-54-00-0E-00-01")
		}, `spec.interfaces[0].dhcp.mac: Invalid value: "52-54-00-0E-00-01": spec.interfaces[0].dhcp.mac in body should match '([0-9a-f]{2}[:]){5}([0-9a-f]{2})'`},
		"enum": {"Workflow", func(o map[string]any) {
			set(o, []any{"spec", "bootOptions"}, "bootMode", "pxe")
		}, `spec.bootOptions.bootMode: Unsupported value: "pxe": supported values: "netboot", "iso"`},
		"additionalProperties type": {"Workflow", func(o map[string]any) {
			set(o, []any{"spec", "hardwareMap"}, "device_2", 7)
		}, `spec.hardwareMap.device_2: Invalid value: "integer": spec.hardwareMap.device_2 in body must be of type string: "integer"`},
		"format date-time": {"Workflow", func(o map[string]any) {
			o["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True", "time": "yesterday"}}}
		}, `status.conditions[0].time: Invalid value: "yesterday": status.conditions[0].time in body must be of type date-time: "yesterday"`},
		"template data not a string": {"Template", func(o map[string]any) {
			set(o, []any{"spec"}, "data", map[string]any{"tasks": []any{}})
		}, `spec.data: Invalid value: "object": spec.data in body must be of type string: "object"`},
		"int-or-string, a string that is no quantity": {"Hardware", func(o map[string]any) {
			set(o, []any{"spec"}, "resources", map[string]any{"cpu": "lots"})
		}, `spec.resources.cpu: Invalid value: "lots": spec.resources.cpu in body should match`},
		"int-or-string, neither": {"Hardware", func(o map[string]any) {
			set(o, []any{"spec"}, "resources", map[string]any{"cpu": true})
		}, `spec.resources.cpu: Invalid value: "boolean": spec.resources.cpu in body must be of type integer,string: "boolean"`},
		"bad name": {"Hardware", func(o map[string]any) {
			set(o, []any{"metadata"}, "name", "Rack1_01")
		}, `metadata.name: Invalid value: "Rack1_01": a lowercase RFC 1123 subdomain must consist of`},
		"name over 253 characters": {"Template", func(o map[string]any) {
			set(o, []any{"metadata"}, "name", strings.Repeat("a", 254))
		}, `metadata.name: Invalid value: "` + strings.Repeat("a", 254) + `": must be no more than 253 characters`},
		"namespace Tink_System": {"Workflow", func(o map[string]any) {
			set(o, []any{"metadata"}, "namespace", "Tink_System")
		}, `metadata.namespace: Invalid value: "Tink_System": a lowercase RFC 1123 label must consist of`},
		"namespace of 70 characters": {"Hardware", func(o map[string]any) {
			set(o, []any{"metadata"}, "namespace", strings.Repeat("t", 70))
		}, `metadata.namespace: Invalid value: "` + strings.Repeat("t", 70) + `": must be no more than 63 characters`},
		"no namespace": {"Hardware", func(o map[string]any) {
			delete(dig(o, "metadata").(map[string]any), "namespace")
		}, "metadata.namespace: Required value"},
		"label value over 63 characters": {"Workflow", func(o map[string]any) {
			set(o, []any{"metadata", "labels"}, "bootops.dev/profile", strings.Repeat("p", 64))
		}, `metadata.labels: Invalid value: "` + strings.Repeat("p", 64) + `": must be no more than 63 bytes`},
		"annotations over 256 KiB": {"Hardware", func(o map[string]any) {
			set(o, []any{"metadata", "annotations"}, "bootops.dev/source", strings.Repeat("x", 256<<10))
		}, "metadata.annotations: Too long: may not be more than 262144 bytes"},
		"wrong apiVersion": {"Template", func(o map[string]any) {
			o["apiVersion"] = "tinkerbell.org/v1"
		}, `apiVersion: Invalid value: "tinkerbell.org/v1": must be tinkerbell.org/v1alpha1`},
	}
	// The API server ignores formats it does not know, url among them:
	// isoURL takes any string (a hand-written check once refused this).
	o := fresh("Workflow")
	set(o, []any{"spec", "bootOptions"}, "isoURL", "not a url")
	if errs := validateObject(crds, o); len(errs) > 0 {
		t.Errorf("isoURL %q: %v; the API server takes it (format url is not one it checks)", "not a url", errs)
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
