package reconciler

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/bootops/bootops/compiler"
)

func TestStateRoundTrip(t *testing.T) {
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Compile(os.DirFS("../examples/cue-fleet"))
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Dir: t.TempDir()}
	if got, err := st.Load(); got != nil || err != nil {
		t.Fatalf("empty state: %v %v", got, err)
	}
	in := &Saved{Source: "https://198.18.0.1/fleet.git", Revision: "0123456789abcdef0123456789abcdef01234567", Message: "m \"q\"", Plan: p}
	if err := st.Save(in); err != nil {
		t.Fatal(err)
	}
	out, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(in)
	b, _ := json.Marshal(out)
	if string(a) != string(b) {
		t.Error("the kept plan differs from the saved one")
	}
	if n := out.Plan.Node(out.Plan.Sites[0].Name, out.Plan.Sites[0].Nodes[0].Name); n == nil {
		t.Error("the loaded plan's index does not work")
	}
	// A damaged file is refused, not served.
	f := filepath.Join(st.Dir, savedName)
	data, _ := os.ReadFile(f)
	os.WriteFile(f, data[:len(data)/2], 0o600)
	if got, err := st.Load(); got != nil || err == nil {
		t.Errorf("truncated state: %v %v", got, err)
	}
}
