package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/swarm"
)

// localSwarm is a server's swarm side in the test: the cache, the
// scheduler and the chunks, on loopback.
type localSwarm struct {
	cache *swarm.Cache
	sched *swarm.Scheduler
	srv   *httptest.Server
	fail  error // what Manifest answers, when set
}

func newLocalSwarm(t *testing.T) *localSwarm {
	l := &localSwarm{cache: &swarm.Cache{Dir: t.TempDir()}, sched: &swarm.Scheduler{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /swarm/{source}/chunk/{i}", func(w http.ResponseWriter, r *http.Request) {
		im := l.cache.Lookup(r.PathValue("source"))
		if im == nil {
			http.NotFound(w, r)
			return
		}
		im.ServeChunk(w, r, l.sched.Key(im.Manifest.Source))
	})
	l.srv = httptest.NewServer(mux)
	t.Cleanup(l.srv.Close)
	return l
}

// client is the swarm line of the machine named name, fetching the image
// at url.
func (l *localSwarm) client(name, url, compression string) SwarmClient {
	return swarmFunc{
		manifest: func(ctx context.Context, image string) (*swarm.Manifest, error) {
			if l.fail != nil {
				return nil, l.fail
			}
			im, err := l.cache.Get(url, image, compression)
			if err != nil {
				return nil, err
			}
			return im.Manifest, nil
		},
		report: func(ctx context.Context, image string, r swarm.Report) (swarm.Reply, error) {
			im := l.cache.Lookup(image)
			return l.sched.Report(im.Manifest, swarm.Member{Name: name, IP: "127.0.0.1", Server: l.srv.URL}, r), nil
		},
	}
}

type swarmFunc struct {
	manifest func(ctx context.Context, image string) (*swarm.Manifest, error)
	report   func(ctx context.Context, image string, r swarm.Report) (swarm.Reply, error)
}

func (f swarmFunc) Manifest(ctx context.Context, image string) (*swarm.Manifest, error) {
	return f.manifest(ctx, image)
}
func (f swarmFunc) Report(ctx context.Context, image string, r swarm.Report) (swarm.Reply, error) {
	return f.report(ctx, image, r)
}

// image-to-disk with peers: the image (gz) is prepared by the server and
// fetched chunk by chunk; the disk holds it, the rest of the disk is left
// as it was, and the progress says where the bytes came from.
func TestImageFromPeers(t *testing.T) {
	data := bytes.Repeat(payload(), 3) // more than two chunks
	file := compress(t, "gz", data)
	r, rec, url := startImage(t, &imageServer{file: file})
	l := newLocalSwarm(t)
	r.Swarm, r.Peers = l.client("a", url, "gz"), &plan.Peers{PerMachine: 2, Linger: "0s"}
	disk := newDisk(t, len(data)+1000)
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Name: "image", Disk: disk, URL: url,
		SHA256: digest(file), Compression: "gz", Timeout: "1m"}))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(disk)
	if !bytes.Equal(got[:len(data)], data) || !bytes.Equal(got[len(data):], bytes.Repeat([]byte{0xee}, 1000)) {
		t.Error("the disk does not hold the image, or was changed after it")
	}
	p := rec.of(plan.AgentProgress)
	if len(p) == 0 {
		t.Fatal("no progress event")
	}
	if last := p[len(p)-1]; last.Bytes != int64(len(data)) || last.FromServer != int64(len(data)) || last.FromPeers != 0 {
		t.Errorf("last progress %+v: want %d bytes, all from the server", last, len(data))
	}
	logs := strings.Join(rec.messages(), "\n")
	for _, want := range []string{"fetching the image", "read back, sha256", "stopped serving the image"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no log line with %q:\n%s", want, logs)
		}
	}
	if st := l.sched.Stats(); st.ServerBytes != int64(len(data)) || st.Members != 0 {
		t.Errorf("scheduler: %+v", st)
	}
}

// A heartbeat still under way when the machine leaves must not put it
// back in the swarm: its report is held until after the leave would have
// gone, and the scheduler must still count no member.
func TestImageFromPeersLeavesForGood(t *testing.T) {
	testutil.Slow(t)
	data := bytes.Repeat(payload(), 3)
	file := compress(t, "gz", data)
	r, _, url := startImage(t, &imageServer{file: file})
	l := newLocalSwarm(t)
	c := l.client("a", url, "gz").(swarmFunc)
	report := c.report
	var mu sync.Mutex
	var order []string
	c.report = func(ctx context.Context, image string, rep swarm.Report) (swarm.Reply, error) {
		if rep.Complete && !rep.Leaving {
			time.Sleep(300 * time.Millisecond) // a slow heartbeat
		}
		mu.Lock()
		order = append(order, map[bool]string{true: "leave", false: "report"}[rep.Leaving])
		mu.Unlock()
		return report(ctx, image, rep)
	}
	r.Swarm, r.Peers = c, &plan.Peers{PerMachine: 2, Linger: "0s"}
	disk := newDisk(t, len(data)+1000)
	err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Name: "image", Disk: disk, URL: url,
		SHA256: digest(file), Compression: "gz", Timeout: "1m"}))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // what a late heartbeat would need to land
	mu.Lock()
	defer mu.Unlock()
	if len(order) == 0 || order[len(order)-1] != "leave" {
		t.Errorf("reports in order %v: the leave must be the last", order)
	}
	if st := l.sched.Stats(); st.Members != 0 {
		t.Errorf("after the machine left, the scheduler counts %d members", st.Members)
	}
}

// When the server cannot give the image to peers, the machine streams it
// from its URL, and says so.
func TestImageFromPeersFallsBack(t *testing.T) {
	data := payload()
	file := compress(t, "zst", data)
	r, rec, url := startImage(t, &imageServer{file: file})
	l := newLocalSwarm(t)
	l.fail = errors.New("GET /api/v1/agent/swarm/…/manifest: 502 Bad Gateway: fetch the image for peers: connection refused")
	r.Swarm, r.Peers = l.client("a", url, "zst"), &plan.Peers{PerMachine: 2, Linger: "0s"}
	disk := newDisk(t, len(data)+1000)
	if err := r.Run(t.Context(), wf(plan.Action{Action: "image-to-disk", Name: "image", Disk: disk, URL: url,
		SHA256: digest(file), Compression: "zst", Timeout: "1m"})); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(disk)
	if !bytes.Equal(got[:len(data)], data) {
		t.Error("the disk does not hold the image")
	}
	if logs := strings.Join(rec.messages(), "\n"); !strings.Contains(logs, "fetching the image with the other machines failed (GET /api/v1/agent/swarm/…/manifest: 502") ||
		!strings.Contains(logs, "fetching it from "+url) {
		t.Errorf("the fallback is not on the timeline:\n%s", logs)
	}
}

// messages are the log lines reported.
func (r *recorder) messages() []string {
	var out []string
	for _, e := range r.of(plan.AgentLog) {
		out = append(out, e.Message)
	}
	return out
}

// A machine that has written the image serves it to the others while its
// workflow goes on (image-to-disk's own handle on the disk is closed by
// then): the second machine gets every byte from the first.
func TestImageServedAfterTheStep(t *testing.T) {
	testutil.Slow(t)
	data := bytes.Repeat(payload(), 3)
	file := compress(t, "gz", data)
	_, _, url := startImage(t, &imageServer{file: file})
	l := newLocalSwarm(t)
	action := func(disk string) plan.Action {
		return plan.Action{Action: "image-to-disk", Name: "image", Disk: disk, URL: url, SHA256: digest(file), Compression: "gz", Timeout: "1m"}
	}
	second := make(chan struct{})
	a, _ := newRunner(t)
	a.Swarm, a.Peers = l.client("a", url, "gz"), &plan.Peers{PerMachine: 2, Linger: "0s"}
	a.Exec = func(ctx context.Context, chroot string, argv []string, out io.Writer) error {
		<-second // the next step waits until the other machine is done
		return nil
	}
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- a.Run(t.Context(), wf(action(newDisk(t, len(data))), plan.Action{Action: "exec", Command: []string{"true"}, Timeout: "1m"}))
	}()
	// The first machine holds the image once it is in its exec step.
	testutil.WaitEvery(t, "the first machine to fetch the image", 30*time.Second, 20*time.Millisecond, func() bool {
		return l.sched.Stats().ServerBytes >= int64(len(data))
	})
	time.Sleep(100 * time.Millisecond)
	b, rec := newRunner(t)
	b.Swarm, b.Peers = l.client("b", url, "gz"), &plan.Peers{PerMachine: 2, Linger: "0s"}
	diskB := newDisk(t, len(data))
	err := b.Run(t.Context(), wf(action(diskB)))
	close(second)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(diskB); !bytes.Equal(got, data) {
		t.Error("the second disk does not hold the image")
	}
	p := rec.of(plan.AgentProgress)
	if last := p[len(p)-1]; last.FromPeers != int64(len(data)) || last.FromServer != 0 {
		t.Errorf("second machine's last progress %+v: want all %d bytes from the first machine", last, len(data))
	}
}
