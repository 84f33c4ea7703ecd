package reconciler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot"
	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

const node = "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n1\nidentity: {serial: S1}\n"

func repo(t *testing.T) string {
	dir := t.TempDir()
	testutil.WriteFile(t, dir, "microos/default.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: MicroOS\nname: default\nkernel: {url: \"http://198.18.0.1/k\", sha256: 1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a}\ninitrd: {url: \"http://198.18.0.1/i\", sha256: 1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a}\n")
	testutil.WriteFile(t, dir, "profiles/base.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Profile\nname: base\nos: {type: immutable}\nimage: {url: \"http://198.18.0.1/b.raw\", sha256: 3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c}\n")
	testutil.WriteFile(t, dir, "sites/s1/site.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Site\nname: s1\nnetwork: {serverAddress: 198.18.0.1}\ndefaultProfile: base\n")
	testutil.WriteFile(t, dir, "sites/s1/nodes/n1.yaml", node)
	return dir
}

func TestDirFollowsEdits(t *testing.T) {
	dir := repo(t)
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	live := &boot.Live{}
	d := &Dir{Path: dir, R: &Reconciler{Compiler: c, Live: live}, Debounce: 300 * time.Millisecond}
	if _, err := d.Load(); err != nil {
		t.Fatal(err)
	}
	first := live.Current()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // the watches are set

	// An edit is served.
	testutil.WriteFile(t, dir, "sites/s1/nodes/n1.yaml", node+"reprovision: 1\n")
	testutil.WaitFor(t, "the edit", 10*time.Second, func() bool { n := live.Current().Node("s1", "n1"); return n != nil && n.Reprovision == 1 })

	// A burst of writes is one compilation.
	before := d.Compilations()
	for i := range 20 {
		testutil.WriteFile(t, dir, "sites/s1/nodes/n1.yaml", node+"reprovision: "+string(rune('2'+i%8))+"\n")
	}
	testutil.WaitFor(t, "the burst", 10*time.Second, func() bool { return d.Compilations() > before })
	time.Sleep(time.Second)
	if n := d.Compilations() - before; n != 1 {
		t.Errorf("a burst of 20 writes made %d compilations", n)
	}

	// A broken edit keeps the last good Plan, and says why.
	good := live.Current()
	testutil.WriteFile(t, dir, "sites/s1/nodes/n1.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n1\nidentity: {serial: [x]}\n")
	testutil.WaitFor(t, "the failed attempt", 10*time.Second, func() bool { return d.R.Status().Attempted.Result == ResultRefused })
	if live.Current() != good {
		t.Error("a broken commit replaced the live plan")
	}
	if st := d.R.Status(); len(st.Attempted.Errors) != 1 || !strings.HasPrefix(st.Attempted.Errors[0], "sites/s1/nodes/n1.yaml:4:") || st.Applied.Revision != "dir:"+good.Hash[:12] || !st.Stale {
		t.Errorf("status: %+v", st)
	}

	// New folders and files are followed too.
	testutil.WriteFile(t, dir, "sites/s1/nodes/n1.yaml", node)
	testutil.WriteFile(t, dir, "sites/s1/more/n2.yaml", "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: n2\nidentity: {serial: S2}\n")
	testutil.WaitFor(t, "the new folder", 10*time.Second, func() bool {
		return live.Current().Node("s1", "n2") != nil && d.R.Status().Attempted.Result == ResultApplied
	})
	if live.Current().Hash == first.Hash {
		t.Error("plan did not change")
	}
	var _ *plan.Plan = first
}
