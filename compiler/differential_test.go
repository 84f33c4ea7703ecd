package compiler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	cueyaml "cuelang.org/go/encoding/yaml"
	"go.yaml.in/yaml/v3"

	"github.com/bootops/bootops/internal/testutil"
)

// The fast path (validator, over the definitions CUE exports) must agree
// with unifying the same document with the CUE schema: same verdict, and for
// valid documents the same value with defaults filled in. These tests run it
// on every YAML document of the golden cases and the examples, and on
// whatever the fuzzer makes of them.

type verdict struct {
	ok    bool
	value any // with defaults, when ok
	why   string
	// cuePanicked: CUE's own YAML decoder panicked (it does on some inputs
	// with bare CR line ends); there is no reference verdict to compare.
	cuePanicked bool
}

func fastVerdict(t testing.TB, c *Compiler, kind string, root *value) verdict {
	t.Helper()
	root = root.clone()
	probs := c.vd.check(kind, root)
	if len(probs) > 0 {
		return verdict{why: probs[0].path + ": " + probs[0].msg}
	}
	return verdict{ok: true, value: normalise(t, root.toAny())}
}

func cueVerdict(t testing.TB, c *Compiler, kind string, doc []byte) (res verdict) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			res = verdict{cuePanicked: true, why: fmt.Sprint(r)}
		}
	}()
	f, err := cueyaml.Extract("doc.yaml", doc)
	if err != nil {
		return verdict{why: "cue yaml: " + err.Error()}
	}
	v := c.ctx.BuildFile(f)
	u := c.schema.LookupPath(cue.MakePath(cue.Def(kind))).Unify(v)
	if err := u.Validate(cue.Concrete(true), cue.Final()); err != nil {
		return verdict{why: err.Error()}
	}
	b, err := u.MarshalJSON()
	if err != nil {
		return verdict{why: err.Error()}
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return verdict{ok: true, value: out}
}

func normalise(t testing.TB, x any) any {
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// compareDoc checks one single-document YAML text; it returns false when
// the document is out of the comparison's scope (not parseable as one
// object of a known kind).
func compareDoc(t testing.TB, c *Compiler, name string, doc []byte) bool {
	t.Helper()
	docs, errs := parseYAML(name, doc)
	if len(errs) > 0 || len(docs) != 1 || docs[0].root == nil || docs[0].root.kind != kMap {
		return false
	}
	k := docs[0].root.get("kind")
	if k == nil || k.kind != kString || c.vd.defs[k.str] == nil || k.str == "" {
		return false
	}
	switch k.str {
	case "Site", "Node", "Profile", "MicroOS":
	default:
		return false
	}
	fast := fastVerdict(t, c, k.str, docs[0].root)
	slow := cueVerdict(t, c, k.str, doc)
	if slow.cuePanicked {
		t.Logf("%s: CUE's YAML decoder panicked (%s); our parser did not", name, slow.why)
		return false
	}
	if fast.ok != slow.ok {
		t.Errorf("%s: fast path says ok=%v (%s), CUE says ok=%v (%s)\n%s", name, fast.ok, fast.why, slow.ok, slow.why, doc)
		return true
	}
	// CUE's YAML decoder rewrites a key like 0755 as "0o755" (it converts
	// YAML 1.1 octal integers for values and applies the same to keys); we
	// keep keys as written. Verdicts must still agree; values are compared
	// only without such keys.
	if fast.ok && !hasLeadingZeroIntKey(doc) && !reflect.DeepEqual(fast.value, slow.value) {
		fb, _ := json.MarshalIndent(fast.value, "", " ")
		sb, _ := json.MarshalIndent(slow.value, "", " ")
		t.Errorf("%s: values differ\nfast: %s\ncue:  %s", name, fb, sb)
	}
	return true
}

// corpus returns every YAML document of the golden cases and examples, one
// document each.
func corpus(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	add := func(name string, data []byte) {
		for i, d := range bytes.Split(data, []byte("\n---\n")) {
			if len(bytes.TrimSpace(d)) > 0 {
				out[name+"#"+string(rune('0'+i))] = d
			}
		}
	}
	txtars, _ := filepath.Glob("testdata/*/repo.txtar")
	txtars = append(txtars, "testdata/_base.txtar")
	for _, p := range txtars {
		for _, f := range readTxtar(t, p).files {
			if strings.HasSuffix(f.Path, ".yaml") || strings.HasSuffix(f.Path, ".yml") {
				add(p+":"+f.Path, f.Data)
			}
		}
	}
	_ = filepath.WalkDir("../examples", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			data, err := os.ReadFile(p)
			if err == nil {
				add(p, data)
			}
		}
		return nil
	})
	return out
}

func TestFastPathAgreesWithCUE(t *testing.T) {
	testutil.Slow(t)
	c := newCompiler(t)
	compared, valid := 0, 0
	docs := corpus(t)
	for _, name := range sortedKeys(docs) {
		if compareDoc(t, c, name, docs[name]) {
			compared++
			if len(c.vd.check(kindOf(docs[name]), mustRoot(t, docs[name]))) == 0 {
				valid++
			}
		}
	}
	// Mutants of every valid document: each field dropped, retyped,
	// emptied, and an unknown field added.
	for _, name := range sortedKeys(docs) {
		docsParsed, errs := parseYAML(name, docs[name])
		if len(errs) > 0 || len(docsParsed) != 1 || docsParsed[0].root == nil {
			continue
		}
		for i, m := range mutants(docsParsed[0].root) {
			var b strings.Builder
			writeYAML(&b, m, 0)
			if compareDoc(t, c, name+"~"+string(rune('a'+i%26)), []byte(b.String())) {
				compared++
				if len(c.vd.check(kindOf([]byte(b.String())), mustRoot(t, []byte(b.String())))) == 0 {
					valid++
				}
			}
		}
	}
	// The corpus must exercise both verdicts.
	if compared < 500 || valid < 50 || compared-valid < 300 {
		t.Errorf("compared %d documents (%d valid): too few", compared, valid)
	}
	t.Logf("compared %d documents, %d valid", compared, valid)
}

func kindOf(doc []byte) string {
	docs, _ := parseYAML("x", doc)
	return docs[0].root.get("kind").String()
}

func mustRoot(t testing.TB, doc []byte) *value {
	docs, _ := parseYAML("x", doc)
	return docs[0].root.clone()
}

func FuzzFastPathAgreesWithCUE(f *testing.F) {
	docs := corpus(f)
	for _, name := range sortedKeys(docs) {
		f.Add(docs[name])
	}
	c := newCompiler(f)
	f.Fuzz(func(t *testing.T, doc []byte) {
		compareDoc(t, c, "fuzz.yaml", doc)
	})
}

// mutants returns variations of v: every field (at any depth) removed, set
// to a value of another type, and set to an empty string, plus an unknown
// field at the top.
func mutants(v *value) []*value {
	var out []*value
	var paths [][]string
	var walk func(x *value, path []string)
	walk = func(x *value, path []string) {
		for i, k := range x.keys {
			p := append(append([]string(nil), path...), k)
			paths = append(paths, p)
			if x.vals[i].kind == kMap {
				walk(x.vals[i], p)
			}
		}
	}
	walk(v, nil)
	replacements := []*value{
		{kind: kInt, i: 42},
		{kind: kString, str: ""},
		{kind: kString, str: "not valid at all"},
		{kind: kBool, b: true},
		{kind: kList, list: []*value{{kind: kString, str: "x"}}},
		{kind: kMap, keys: []string{"x"}, vals: []*value{{kind: kString, str: "y"}}},
		{kind: kInt, i: -1},
	}
	for _, p := range paths {
		// drop
		m := v.clone()
		parent := m.lookup(p[:len(p)-1]...)
		for i, k := range parent.keys {
			if k == p[len(p)-1] {
				parent.keys = append(parent.keys[:i:i], parent.keys[i+1:]...)
				parent.vals = append(parent.vals[:i:i], parent.vals[i+1:]...)
				break
			}
		}
		out = append(out, m)
		for _, r := range replacements {
			m := v.clone()
			m.lookup(p[:len(p)-1]...).set(p[len(p)-1], r.clone())
			out = append(out, m)
		}
	}
	m := v.clone()
	m.set("extraField", &value{kind: kString, str: "x"})
	return append(out, m)
}

func hasLeadingZeroIntKey(doc []byte) bool {
	var n yaml.Node
	if yaml.Unmarshal(doc, &n) != nil {
		return false
	}
	var walk func(n *yaml.Node) bool
	walk = func(n *yaml.Node) bool {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if k.ShortTag() == "!!int" && len(k.Value) > 1 && strings.TrimLeft(k.Value, "+-")[0] == '0' {
					return true
				}
			}
		}
		for _, c := range n.Content {
			if walk(c) {
				return true
			}
		}
		return false
	}
	return walk(&n)
}
