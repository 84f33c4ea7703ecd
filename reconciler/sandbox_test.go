package reconciler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/internal/testutil"
)

// TestMain lets Child run this test binary as the compile worker.
func TestMain(m *testing.M) {
	if os.Getenv("BOOTOPS_TEST_COMPILE_WORKER") == "1" {
		os.Exit(testWorker(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func testWorker(args []string) int {
	var memory int64
	if i := slices.Index(args, "--memory"); i >= 0 && i+1 < len(args) {
		memory, _ = strconv.ParseInt(args[i+1], 10, 64)
	}
	if err := LimitWorker(memory); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := compiler.New()
	if err == nil {
		err = c.EvalWorker(os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func child(timeout time.Duration, memory int64) *Child {
	return &Child{Command: []string{os.Args[0]}, Env: append(os.Environ(), "BOOTOPS_TEST_COMPILE_WORKER=1"), Timeout: timeout, Memory: memory}
}

// A Plan compiled through the child is the Plan compiled in-process, and
// a revision's CUE errors are the same, positions and all.
func TestChildCompilesAsInProcess(t *testing.T) {
	broken := repo(t)
	testutil.WriteFile(t, broken, "sites/s1/more.cue", "package fleet\n\nn2: #Node & {apiVersion: \"bootops.dev/v1alpha1\", kind: \"Node\", name: \"n2\", identity: serial: 42}\nn3: {apiVersion: \"bootops.dev/v1alpha1\", kind: \"Node\", name: \"n3\", identity: {serial: \"S3\"}, profle: \"base\"}\n")
	mixed := repo(t)
	testutil.WriteFile(t, mixed, "sites/s1/more.cue", "package fleet\n\nimport \"list\"\n\nnodes: [for i in list.Range(2, 12, 1) {apiVersion: \"bootops.dev/v1alpha1\", kind: \"Node\", name: \"n\\(i)\", identity: serial: \"S\\(i)\", labels: {rack: \"r\\(mod(i, 3))\", weight: \"\\(i * 1.5)\"}}]\n")
	for name, dir := range map[string]string{"cue-fleet": "../examples/cue-fleet", "mixed": mixed, "broken": broken} {
		t.Run(name, func(t *testing.T) {
			in, err := compiler.New()
			if err != nil {
				t.Fatal(err)
			}
			out, _ := compiler.New()
			out.Sandbox = child(time.Minute, DefaultCompileMemory)
			want, wantErr := in.Compile(os.DirFS(dir))
			got, gotErr := out.Compile(os.DirFS(dir))
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("errors through the child:\n%v\nin-process:\n%v", gotErr, wantErr)
			}
			var list compiler.Errors
			if (wantErr != nil) != (name == "broken") || wantErr != nil && !errors.As(gotErr, &list) {
				t.Fatalf("error %T %v", gotErr, gotErr)
			}
			if want != nil && (got.Hash != want.Hash || countNodes(got) != countNodes(want)) {
				t.Errorf("plan through the child %s (%d nodes), in-process %s (%d nodes)", got.Hash, countNodes(got), want.Hash, countNodes(want))
			}
		})
	}
}

// A revision whose CUE takes more memory than the limit is refused with a
// reason that says so, the Plan served stays, and the next revision is
// compiled as any other.
func TestApplyRefusesMemoryHungryCUE(t *testing.T) {
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	c.Sandbox = child(5*time.Minute, 256<<20)
	r := &Reconciler{Compiler: c, Live: &boot.Live{}}
	dir := repo(t)
	testutil.WriteFile(t, dir, "sites/s1/n2.cue", "package fleet\n\nn2: {apiVersion: \"bootops.dev/v1alpha1\", kind: \"Node\", name: \"n2\", identity: serial: \"S2\"}\n")
	good, err := r.Apply(Snapshot{Revision: "good", FS: os.DirFS(dir)})
	if err != nil {
		t.Fatal(err)
	}
	// 300 strings of 7 MB: 2 GB.
	testutil.WriteFile(t, dir, "sites/s1/big.cue", "package fleet\n\nimport (\n\t\"list\"\n\t\"strings\"\n)\n\n_s: strings.Repeat(\"bootops\", 1000000)\n_x: [for i in list.Range(0, 300, 1) {_s + \"\\(i)\"}]\n")
	start := time.Now()
	_, err = r.Apply(Snapshot{Revision: "big", FS: os.DirFS(dir)})
	t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	var le *LimitError
	st := r.Status()
	if !errors.As(err, &le) || le.Memory != 256<<20 || st.Attempted.Revision != "big" || st.Attempted.Result != ResultRefused || st.Attempted.Error != "needed more than 256 MiB to compile (the limit is serve's --compile-memory)" {
		t.Fatalf("err %v; attempted %+v", err, st.Attempted)
	}
	if r.Current() != good || st.Applied.Revision != "good" || !st.Stale || !strings.Contains(st.Reason, "needed more than 256 MiB") {
		t.Errorf("after the refusal: current %p (good %p), status %+v", r.Current(), good, st)
	}
	testutil.WriteFile(t, dir, "sites/s1/big.cue", "package fleet\n\nn3: {apiVersion: \"bootops.dev/v1alpha1\", kind: \"Node\", name: \"n3\", identity: serial: \"S3\"}\n")
	p, err := r.Apply(Snapshot{Revision: "fixed", FS: os.DirFS(dir)})
	if err != nil || countNodes(p) != 3 || r.Status().Applied.Revision != "fixed" {
		t.Fatalf("the fixed revision: %v, status %+v", err, r.Status())
	}
}

// fleetCUE writes a repository of sites sites of perSite nodes each, the
// nodes made by a CUE comprehension, and returns it.
func fleetCUE(b testing.TB, sites, perSite int) string {
	dir := b.TempDir()
	write2 := func(name, body string) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write2("microos/default.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {url: \"http://198.18.0.1/k\", sha256: 1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a}\ninitrd: {url: \"http://198.18.0.1/i\", sha256: 1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a}\n")
	write2("profiles/base.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: base\nos: {type: immutable}\nimage: {url: \"http://198.18.0.1/b.raw\", sha256: 3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c}\n")
	for s := range sites {
		write2(fmt.Sprintf("sites/s%d/site.yaml", s), fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: s%d\nnetwork: {serverAddress: 198.18.%d.1}\ndefaultProfile: base\n", s, s))
	}
	write2("fleet.cue", fmt.Sprintf("package fleet\n\nimport \"list\"\n\n_rev: 0\nnodes: {\n\tfor s in list.Range(0, %d, 1) for i in list.Range(0, %d, 1) {\n\t\t\"n\\(s)-\\(i)\": #Node & {apiVersion: \"bootops.dev/v1alpha1\", kind: \"Node\", name: \"n\\(s)-\\(i)\", site: \"s\\(s)\", identity: serial: \"SN\\(s)-\\(i)\", labels: {rack: \"r\\(mod(i, 40))\", rev: \"\\(_rev)\"}}\n\t}\n}\n", sites, perSite))
	return dir
}

// BenchmarkCUERevision compiles revisions that change a CUE file (so the
// CUE is evaluated each time) in-process and through the child process,
// and revisions of the same repository that change only a YAML file.
//
//	go test ./reconciler -run - -bench CUERevision -benchtime 10x
func BenchmarkCUERevision(b *testing.B) {
	for _, size := range []struct{ sites, perSite int }{{2, 100}, {10, 100}} {
		for _, how := range []string{"in-process", "child", "yaml-only/child"} {
			b.Run(fmt.Sprintf("%d-nodes/%s", size.sites*size.perSite, how), func(b *testing.B) {
				dir := fleetCUE(b, size.sites, size.perSite)
				c, err := compiler.New()
				if err != nil {
					b.Fatal(err)
				}
				if how != "in-process" {
					c.Sandbox = child(time.Minute, DefaultCompileMemory)
				}
				r := &Reconciler{Compiler: c, Live: &boot.Live{}}
				fleet, _ := os.ReadFile(filepath.Join(dir, "fleet.cue"))
				if _, err := r.Apply(Snapshot{FS: os.DirFS(dir)}); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := range b.N {
					file, body, changed := "fleet.cue", strings.Replace(string(fleet), "_rev: 0", fmt.Sprintf("_rev: %d", i+1), 1), []string{"fleet.cue"}
					if strings.HasPrefix(how, "yaml-only") {
						file, body, changed = "profiles/base.yaml", fmt.Sprintf("apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: base\nos: {type: immutable, version: \"%d\"}\nimage: {url: \"http://198.18.0.1/b.raw\", sha256: 3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c}\n", i+1), []string{"profiles/base.yaml"}
					}
					if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
						b.Fatal(err)
					}
					if _, err := r.Apply(Snapshot{FS: os.DirFS(dir), Changed: changed}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// A daemon that stops kills the worker at once, whatever its deadline.
func TestChildStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	sb := child(10*time.Minute, DefaultCompileMemory)
	sb.Context = ctx
	c.Sandbox = sb
	dir := repo(t)
	testutil.WriteFile(t, dir, "slow.cue", "package fleet\n\nimport \"list\"\n\n_x: [for i in list.Range(0, 500000, 1) {i * 2}]\n")
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err = c.Compile(os.DirFS(dir))
	if err == nil || !strings.Contains(err.Error(), "compile worker: stopped") {
		t.Errorf("compile: %v", err)
	}
}
