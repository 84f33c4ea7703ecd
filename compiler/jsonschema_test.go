package compiler

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"cuelang.org/go/cue/cuecontext"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/schema"
)

// jsonSchemaCannot lists the golden cases whose errors a JSON Schema cannot
// express, and why: for every other invalid case, the JSON Schema of
// `bootops schema --jsonschema` must refuse a document of a file an error
// names, and for every valid case it must accept every YAML document.
var jsonSchemaCannot = map[string]string{
	// Rules across objects.
	"duplicate-mac":             "an identifier used by two nodes",
	"duplicate-node-name":       "a name used twice",
	"duplicate-serial":          "an identifier used by two nodes",
	"duplicate-uuid":            "an identifier used by two nodes",
	"provision-without-default": "a site's policy against its defaultProfile",
	"reservation-ip-rules":      "addresses against the subnet and each other",
	"site-path-mismatch":        "a node's site against its file's folder",
	"unknown-microos":           "a reference to another object",
	"bad-arch":                  "a profile's os.arch against its MicroOS's arch (another object)",
	"unknown-profile-hint":      "a reference to another object",
	"bad-default-profile":       "a reference to another object",
	"unknown-site":              "a reference to another object",
	"microos-path-missing":      "a file in the repository",
	"ip-in-proxy-site":          "a node's ip against its site's DHCP mode",
	"ipv6-in-proxy-site":        "a node's ipv6 against its site's DHCPv6 mode",
	"bad-ipv6-server":           "an address against the prefix, and its kind (link-local, multicast, …)",
	"bad-ipv6-pool":             "addresses against the prefix and each other (and the pool's own mode rule, like the IPv4 one, is not said)",
	"bad-ipv6-reservations":     "addresses against the prefix and each other",
	"template-unknown-var":      "${…} variables in cloud-init values",
	"bad-chain-uki":             "a field required by another field's value (the generated schema has no if/then)",
	"bad-qcow2":                 "a URL's file type (a pattern would have to forbid a suffix)",
	"bad-https-boot":            "a field allowed by another field's value (the generated schema has no if/then)",
	"bad-env-name":              "the names of a map's keys",
	"bad-env-secret":            "words of a map's keys, private keys in its values",
	// Not YAML documents a JSON Schema sees.
	"cue-conflict":          "CUE evaluation",
	"cue-field-not-allowed": "CUE evaluation",
	"cue-import":            "CUE evaluation",
	"cue-syntax":            "CUE syntax",
	"cmdline-cue":           "CUE objects",
	"yaml-duplicate-key":    "YAML parsing",
	"yaml-empty-document":   "YAML parsing",
	"yaml-empty-file":       "YAML parsing",
	"yaml-merge-key":        "YAML parsing",
	"yaml-syntax":           "YAML parsing",
	"yaml-tab":              "YAML parsing",
	"yaml-bad-indent":       "YAML parsing",
}

// TestJSONSchemaAgreesWithValidate checks `bootops schema --jsonschema`
// with a third-party validator against every golden case.
func TestJSONSchemaAgreesWithValidate(t *testing.T) {
	testutil.Slow(t)
	sv, err := schema.Compile(cuecontext.New())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := schema.JSONSchema(sv)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	jc := jsonschema.NewCompiler()
	if err := jc.AddResource("bootops.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := jc.Compile("bootops.schema.json")
	if err != nil {
		t.Fatal(err)
	}

	base := readTxtar(t, "testdata/_base.txtar")
	dirs, err := filepath.Glob("testdata/*/repo.txtar")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		name := filepath.Base(dir)
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			fsys := goldenFS(t, base, dir)
			_, cerr := newCompiler(t).Compile(fsys)
			var errs Errors
			if cerr != nil && !errors.As(cerr, &errs) {
				t.Fatal(cerr)
			}
			// What the schema says of each YAML document, by file.
			rejected := map[string][]string{}
			listing, _, _ := listFiles(fsys, false)
			for _, l := range listing {
				if ext := path.Ext(l.path); ext != ".yaml" && ext != ".yml" {
					continue
				}
				data, _ := fs.ReadFile(fsys, l.path)
				docs, perr := parseYAML(l.path, data)
				if len(perr) > 0 {
					rejected[l.path] = append(rejected[l.path], "YAML: "+perr.Error())
					continue
				}
				for _, d := range docs {
					if d.root == nil {
						continue
					}
					b, err := json.Marshal(d.root.toAny())
					if err != nil {
						t.Fatal(err)
					}
					inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
					if err != nil {
						t.Fatal(err)
					}
					if err := sch.Validate(inst); err != nil {
						rejected[l.path] = append(rejected[l.path], err.Error())
					}
				}
			}
			why, cannot := jsonSchemaCannot[name]
			if cerr == nil {
				if cannot {
					t.Errorf("a valid case is on jsonSchemaCannot (%s)", why)
				}
				for _, f := range sortedKeys(rejected) {
					t.Errorf("valid, but the JSON Schema rejects %s:\n%s", f, strings.Join(rejected[f], "\n"))
				}
				return
			}
			files := map[string]bool{}
			for _, e := range errs {
				files[e.Pos.File] = true
			}
			agrees := false
			for f := range files {
				if len(rejected[f]) > 0 {
					agrees = true
				}
			}
			switch {
			case !agrees && !cannot:
				t.Errorf("bootops validate refuses it, the JSON Schema accepts every document of %s:\n%v\n(a rule JSON Schema cannot say? list it in jsonSchemaCannot, with why)", strings.Join(sortedKeys(files), ", "), cerr)
			case agrees && cannot && !strings.HasPrefix(why, "YAML"):
				t.Errorf("on jsonSchemaCannot (%s), but the JSON Schema refuses it too: take it off the list", why)
			}
		})
	}
	var stale []string
	for name := range jsonSchemaCannot {
		if !seen[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("jsonSchemaCannot names cases that do not exist: %v", stale)
	}
}
