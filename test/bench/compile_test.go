package bench

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/fleet"
)

// BenchmarkRecompileOneNode measures a compilation of the 10,000-node,
// 50-site fleet after one node file changed, with a warm cache: "stat" checks
// every file's size and mtime (Compile), "watched" is told which file changed
// (CompileChanged, what the daemon's watcher does).
//
//	go test ./test/bench -run XXX -bench RecompileOneNode -benchtime 50x
func BenchmarkRecompileOneNode(b *testing.B) {
	b.Run("stat", func(b *testing.B) { benchRecompile(b, false) })
	b.Run("watched", func(b *testing.B) { benchRecompile(b, true) })
}

// BenchmarkRecompileOneProfile is the change the fast path does not take:
// a profile edit reaches 3,334 nodes, so the whole fleet is checked again
// (from the content cache) and those nodes are rendered again.
func BenchmarkRecompileOneProfile(b *testing.B) {
	dir, c, fsys := warmFleet(b)
	const rel = "profiles/edge-mutable.yaml"
	orig, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		body := fmt.Appendf(append([]byte(nil), orig...), "kernelArgs: [\"bench=%d\"]\n", i)
		if err := os.WriteFile(filepath.Join(dir, rel), body, 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := c.CompileChanged(fsys, []string{rel}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRecompile(b *testing.B, watched bool) {
	dir, c, fsys := warmFleet(b)
	node := filepath.Join(dir, fleet.NodeFile(sites, 1234))
	orig, err := os.ReadFile(node)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		body := fmt.Appendf(append([]byte(nil), orig...), "reprovision: %d\n", i+1)
		if err := os.WriteFile(node, body, 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var p *plan.Plan
		if watched {
			p, err = c.CompileChanged(fsys, []string{fleet.NodeFile(sites, 1234)})
		} else {
			p, err = c.Compile(fsys)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if n := p.Node("site-034", "node-01234"); n == nil || n.Reprovision != i+1 {
			b.Fatalf("recompile did not pick up the change: %+v", n)
		}
		b.StartTimer()
	}
}

const sites, nodes = 50, 10000

// warmFleet generates the fleet and compiles it once.
func warmFleet(b *testing.B) (string, *compiler.Compiler, fs.FS) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "fleet")
	if err := fleet.Generate(dir, sites, nodes); err != nil {
		b.Fatal(err)
	}
	c, err := compiler.New()
	if err != nil {
		b.Fatal(err)
	}
	fsys := os.DirFS(dir)
	if _, err := c.Compile(fsys); err != nil {
		b.Fatal(err)
	}
	return dir, c, fsys
}

// BenchmarkCompileCold compiles the 10,000-node fleet with a new Compiler
// each time (in process: no process start, no output written).
func BenchmarkCompileCold(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "fleet")
	if err := fleet.Generate(dir, sites, nodes); err != nil {
		b.Fatal(err)
	}
	fsys := os.DirFS(dir)
	b.ResetTimer()
	for range b.N {
		c, err := compiler.New()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Compile(fsys); err != nil {
			b.Fatal(err)
		}
	}
}
