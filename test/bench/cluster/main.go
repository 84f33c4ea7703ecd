// Command cluster measures a site's cluster (BENCHMARKS.md, "A site with
// more than one server") on loopback, in one process, bounded in count:
//
//   - check-in writes: what a check-in writes before it is answered (a
//     spent token, a session and its event on the node's timeline), N
//     times from C goroutines, into three members' cluster (the event in
//     the member's own store and the site's log) and, in the same run,
//     into one daemon's bbolt store (status.Durable) — per second, and the
//     p50/p99 of one;
//
//   - DHCP answers that lease: an offer and the lease that answers the
//     REQUEST (lease.Store.Offer, Confirm) for N clients, C at once, in
//     one daemon's pool (its journal on disk) and in a member's pool whose
//     every lease is copied to the site's log before the ACK;
//
//   - takeover: K times, the DHCP role's holder is closed (its process
//     gone, nothing given back) and the time until another member holds
//     it is taken; the closed member then starts again.
//
//     go run ./test/bench/cluster -n 2000 -c 16 -kills 20
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/bootops/bootops/boot/lease"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/sitecluster"
	"github.com/bootops/bootops/trust"
)

type store interface {
	UseToken(id string, expires time.Time) (bool, error)
	PutSession(key string, s status.Session) error
	RecordSync(evs ...status.Event) error
}

// member is a member's check-in path (daemon.clustered): the cluster's
// token and session, then the event in its own store and in the site's
// log at once.
type member struct {
	*sitecluster.Member
	own *status.Durable
}

func (m member) RecordSync(evs ...status.Event) error {
	logged := make(chan error, 1)
	go func() {
		b, _ := json.Marshal(evs)
		logged <- m.Append(sitecluster.LogEvents, b)
	}()
	return errors.Join(m.own.RecordSync(evs...), <-logged)
}

func main() {
	n := flag.Int("n", 2000, "check-ins (at most 100,000)")
	c := flag.Int("c", 16, "at once")
	kills := flag.Int("kills", 20, "takeovers to time (at most 100)")
	flag.Parse()
	if *n < 1 || *n > 100000 || *c < 1 || *kills < 0 || *kills > 100 {
		log.Fatal("usage: cluster [-n 1..100000] [-c N] [-kills 0..100]")
	}
	dir, err := os.MkdirTemp("", "bootops-cluster-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfgs := configs(dir)
	ms := start(cfgs)
	durable, err := status.Open(filepath.Join(dir, "status.db"), status.Options{})
	if err != nil {
		log.Fatal(err)
	}
	out := map[string]any{}
	own, err := status.Open(filepath.Join(dir, "member.db"), status.Options{})
	if err != nil {
		log.Fatal(err)
	}
	out["bbolt"] = checkIns(durable, *n, *c)
	out["cluster"] = checkIns(member{ms[0], own}, *n, *c)
	durable.Close()
	own.Close()
	out["dhcp_leases_alone"] = leases(&lease.Store{Path: filepath.Join(dir, "leases-alone.json")}, *n, *c)
	copied := &lease.Store{Path: filepath.Join(dir, "leases-member.json")}
	copied.Replicate = func(key string, r lease.Record) error {
		b, _ := json.Marshal(map[string]any{"pool": "leases-lab.json", "key": key, "ip": r.IP.String(), "expires": r.Expires})
		return ms[0].Append(sitecluster.LogLeases, b)
	}
	out["dhcp_leases_cluster"] = leases(copied, *n, *c)
	out["takeover"] = takeovers(ms, cfgs, *kills)
	for _, m := range ms {
		if m != nil {
			m.Close()
		}
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
}

// configs are three members on loopback, with peer certificates of one CA.
func configs(dir string) []sitecluster.Config {
	ca := filepath.Join(dir, "ca")
	if err := trust.InitCA(ca, trust.CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		log.Fatal(err)
	}
	ports := []string{"127.0.0.1:17421", "127.0.0.1:17422", "127.0.0.1:17423"}
	var cfgs []sitecluster.Config
	for i, name := range []string{"a", "b", "c"} {
		cert, key, err := trust.IssuePeer(ca, name, []string{"127.0.0.1"}, 1, time.Now())
		if err != nil {
			log.Fatal(err)
		}
		cf, kf := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		os.WriteFile(cf, cert, 0o644)
		os.WriteFile(kf, key, 0o600)
		tls, err := trust.PeerTLS(cf, kf, filepath.Join(ca, trust.CAFile))
		if err != nil {
			log.Fatal(err)
		}
		var peers []string
		for j, p := range ports {
			if j != i {
				peers = append(peers, p)
			}
		}
		cfgs = append(cfgs, sitecluster.Config{Name: name, Listen: ports[i], Peers: peers, TLS: tls, StoreDir: filepath.Join(dir, name)})
	}
	return cfgs
}

func start(cfgs []sitecluster.Config) []*sitecluster.Member {
	ms := make([]*sitecluster.Member, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() {
			m, err := sitecluster.Start(context.Background(), cfgs[i])
			if err != nil {
				log.Fatal(err)
			}
			ms[i] = m
		})
	}
	wg.Wait()
	return ms
}

// timed runs op(i) for i in [0, n), c at once, and gives the count
// (named what), c, per second, and the p50 and p99 of one op.
func timed(what string, n, c int, op func(i int) error) map[string]any {
	lat := make([]time.Duration, n)
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for i := range jobs {
				t := time.Now()
				if err := op(i); err != nil {
					log.Fatal(err)
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(lat)
	return map[string]any{what: n, "at_once": c, "per_second": float64(n) / took.Seconds(),
		"p50_ms": millis(lat[n/2]), "p99_ms": millis(lat[n*99/100])}
}

// checkIns writes n check-ins' facts, c at once.
func checkIns(s store, n, c int) map[string]any {
	run := time.Now().UnixNano()
	return timed("checkins", n, c, func(i int) error {
		id := fmt.Sprintf("tok-%d-%d", run, i)
		if _, err := s.UseToken(id, time.Now().Add(time.Hour)); err != nil {
			return err
		}
		if err := s.PutSession(fmt.Sprintf("lab/n%d", i), status.Session{ID: id, Steps: 4, Started: time.Now()}); err != nil {
			return err
		}
		return s.RecordSync(status.Event{Kind: status.KindAgent, Site: "lab", Node: fmt.Sprintf("n%d", i), State: status.StateMicroOS, Installing: true, Message: "agent checked in"})
	})
}

// leases answers n clients' DISCOVER and REQUEST from pool, c at once
// (one op: a client's two answers).
func leases(pool *lease.Store, n, c int) map[string]any {
	r := lease.Range{First: netip.MustParseAddr("198.18.16.1"), Last: netip.MustParseAddr("198.18.127.254")}
	return timed("clients", n, c, func(i int) error {
		mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255)
		a, err := pool.Offer(mac, r)
		if err != nil {
			return err
		}
		_, err = pool.Confirm(mac, a, r, time.Hour)
		return err
	})
}

// takeovers closes the role's holder k times and times until another
// holds it; the closed member starts again after each.
func takeovers(ms []*sitecluster.Member, cfgs []sitecluster.Config, k int) map[string]any {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	roles := make([]*sitecluster.Role, len(ms))
	campaign := func(i int) {
		roles[i] = ms[i].Campaign(ctx, "dhcp.bench", nil)
	}
	for i := range ms {
		campaign(i)
	}
	holder := func(except int) int {
		for i, r := range roles {
			if i != except && r != nil && r.Active() {
				return i
			}
		}
		return -1
	}
	var times []time.Duration
	for range k {
		h := -1
		for deadline := time.Now().Add(time.Minute); h < 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			h = holder(-1)
		}
		if h < 0 {
			log.Fatal("no holder within a minute")
		}
		start := time.Now()
		ms[h].Close() // gone: nothing given back
		roles[h] = nil
		next := -1
		for deadline := time.Now().Add(time.Minute); next < 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			next = holder(h)
		}
		if next < 0 {
			log.Fatal("no takeover within a minute")
		}
		times = append(times, time.Since(start))
		m, err := sitecluster.Start(context.Background(), cfgs[h])
		if err != nil {
			log.Fatal(err)
		}
		ms[h] = m
		campaign(h)
	}
	if len(times) == 0 {
		return nil
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	var each []float64
	for _, t := range times {
		each = append(each, millis(t))
	}
	return map[string]any{"kills": len(times), "min_ms": millis(sorted[0]), "p50_ms": millis(sorted[len(sorted)/2]), "max_ms": millis(sorted[len(sorted)-1]), "each_ms": each}
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
