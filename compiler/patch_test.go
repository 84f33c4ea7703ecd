package compiler

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/test/fleet"
)

// The fast path of CompileChanged must give exactly what a full, cold
// compilation gives: after every one of a series of random edits, the same
// Plan hash or the same errors.
func TestPatchMatchesFullCompile(t *testing.T) {
	testutil.Slow(t)
	const sites, nodes, steps = 5, 300, 150
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := fleet.Generate(dir, sites, nodes); err != nil {
		t.Fatal(err)
	}
	fsys := os.DirFS(dir)
	c := newCompiler(t)
	if _, err := c.Compile(fsys); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	originals := map[string]string{}
	for step := range steps {
		i := rng.IntN(nodes)
		rel := fleet.NodeFile(sites, i)
		file := filepath.Join(dir, rel)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		body := string(data)
		if _, ok := originals[rel]; !ok {
			originals[rel] = body
		}
		other := fmt.Sprintf("SN%08d", rng.IntN(nodes))
		var what string
		switch k := rng.IntN(11); k {
		case 0, 1:
			what, body = "reprovision", body+fmt.Sprintf("reprovision: %d\n", step+1)
		case 2:
			what, body = "label", strings.Replace(body, "rack: r", "rack: q", 1)
		case 3:
			what, body = "fresh serial", replaceLine(body, "  serial: ", fmt.Sprintf("  serial: NEW%06d", step))
		case 4:
			what, body = "clashing serial", replaceLine(body, "  serial: ", "  serial: "+other)
		case 5:
			what = "profile"
			if strings.Contains(body, "edge-mutable") {
				body = strings.Replace(body, "edge-mutable", "edge-immutable", 1)
			} else {
				body = strings.Replace(body, "edge-immutable", "edge-mutable", 1)
			}
		case 6:
			what, body = "rename", replaceLine(body, "name: ", fmt.Sprintf("name: renamed-%d", step))
		case 7:
			what, body = "invalid", replaceLine(body, "  mac: ", "  mac: zz")
		case 8:
			what, body = "static ip", body+"ip: 198.18.0.9\n"
		case 9:
			what, body = "second document", body+fmt.Sprintf("---\napiVersion: bootops.dev/v1alpha1\nkind: Node\nname: extra-%d\nidentity: {serial: EXTRA%d}\n", step, step)
		default:
			what, body = "restore", originals[rel]
		}
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, gerr := c.CompileChanged(fsys, []string{rel})
		want, werr := newCompiler(t).Compile(fsys)
		switch {
		case (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error():
			t.Fatalf("step %d (%s of %s): errors differ\n got: %v\nwant: %v", step, what, rel, gerr, werr)
		case gerr == nil && got.Hash != want.Hash:
			t.Fatalf("step %d (%s of %s): plan %s, a full compilation gives %s", step, what, rel, got.Hash, want.Hash)
		}
		// Put errors right again, so the series goes on from valid states.
		if werr != nil {
			os.WriteFile(file, []byte(originals[rel]), 0o644)
			if _, err := c.CompileChanged(fsys, []string{rel}); err != nil {
				fix, _ := newCompiler(t).Compile(fsys)
				if fix != nil {
					t.Fatalf("step %d: restoring %s: %v", step, rel, err)
				}
			}
		}
	}
	if c.patched < steps/4 {
		t.Errorf("the fast path ran %d times in %d steps", c.patched, steps)
	}
	t.Logf("fast path: %d of %d compilations", c.patched, steps)
}

func replaceLine(body, prefix, with string) string {
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			lines[i] = with
			break
		}
	}
	return strings.Join(lines, "\n")
}
