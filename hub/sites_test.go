package hub

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// Fifty sites, each with a stream of its own bounded at the default
// 1 GiB: every stream is made and every site's events are taken in
// (JetStream reserves each stream's bound against its store, which by
// default is 75 % of the disk's free space: the 49th site's stream was
// refused on a 64 GB disk, and its events were never acknowledged).
func TestHubFiftySites(t *testing.T) {
	testutil.Slow(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var names []string
	for i := range 50 {
		names = append(names, fmt.Sprintf("site-%02d", i))
	}
	pubs, kps := siteKeys(t, names...)
	var hubLog testutil.SyncBuffer
	hubs := cluster(t, ctx, 1, pubs, slog.New(slog.NewTextHandler(&hubLog, nil)))
	var sites []*site
	for i, n := range names {
		sites = append(sites, newSite(t, ctx, n, i, []string{hubs[0].cfg.Listen}, kps[n]))
	}
	for _, s := range sites {
		s.provision(t, 0, 20)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, s := range sites {
		if !testutil.Poll(time.Until(deadline), 100*time.Millisecond, func() bool { out, _ := s.store.Pending(0, 1); return len(out) == 0 }) {
			t.Errorf("%s not drained; its log:\n%s", s.name, testutil.Tail(s.log.String(), 10))
		}
	}
	if t.Failed() {
		t.Logf("hub log:\n%s", testutil.Tail(hubLog.String(), 20))
	}
	caughtUp(t, ctx, hubs[0], time.Minute)
	sameView(t, hubs[0], sites)
}
