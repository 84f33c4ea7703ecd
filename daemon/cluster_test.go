package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// A site of three daemons on one demo repository: a boot token minted by
// one is good on another, once (a third refuses it spent); the session a
// check-in opened on one takes the agent's events on another; the node
// that member saw provisioned is sent to its disk by the member that
// never saw it — never given a workflow again.
func TestSiteOfThreeDaemons(t *testing.T) {
	testutil.Slow(t)
	ca := t.TempDir()
	if err := trust.InitCA(ca, trust.CAOptions{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	addrs := testutil.FreePorts(t, 3)
	logs := make([]*lockedBuffer, 3)
	cfgs := make([]Config, 3)
	for i, name := range []string{"a", "b", "c"} {
		logs[i] = &lockedBuffer{}
		cfg := demoConfig(t, logs[i])
		cert, key, err := trust.IssuePeer(ca, name, []string{"127.0.0.1"}, 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		tls := filepath.Join(cfg.StateDir, "tls")
		os.MkdirAll(tls, 0o700)
		os.WriteFile(filepath.Join(tls, "peer.pem"), cert, 0o644)
		os.WriteFile(filepath.Join(tls, "peer-key.pem"), key, 0o600)
		ca, _ := os.ReadFile(filepath.Join(ca, trust.CAFile))
		os.WriteFile(filepath.Join(tls, trust.CAFile), ca, 0o644)
		var peers []string
		for j, a := range addrs {
			if j != i {
				peers = append(peers, a)
			}
		}
		cfg.Cluster = ClusterConfig{Name: name, Listen: addrs[i], Peers: peers}
		if name == "a" {
			// a was the site's one daemon: vm-mac is installed in its store.
			st, err := status.Open(filepath.Join(cfg.StateDir, "status.db"), status.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.RecordSync(status.Event{Kind: status.KindAgent, Site: "lab", Node: "vm-mac", State: status.StateProvisioned, Generation: 1, Install: &plan.Install{Digest: "d-mac"}}); err != nil {
				t.Fatal(err)
			}
			st.Close()
		}
		cfg.Dashboard.OpenReads = true
		cfgs[i] = cfg
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() {
			if err := Run(ctx, cfgs[i]); err != nil {
				t.Errorf("daemon %d: %v", i, err)
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	base := make([]string, 3)
	for i := range logs {
		if !testutil.Poll(90*time.Second, 50*time.Millisecond, func() bool {
			base[i] = logs[i].field("started", "http")
			return base[i] != "" && logs[i].field("serving", "site") != ""
		}) {
			t.Fatalf("daemon %d not started:\n%s", i, logs[i].String())
		}
		base[i] = "http://" + base[i]
	}

	// A boot token from a: good on b, once; c refuses it spent.
	_, script := do(t, "GET", base[0]+"/ipxe?serial=DEMO-0001", "", "")
	m := regexp.MustCompile(`bootops\.token=([A-Za-z0-9.]+)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no boot token in a's script:\n%s", script)
	}
	ci, _ := json.Marshal(plan.CheckIn{Site: "lab", Node: "vm-serial", Identity: plan.Identity{Serial: "DEMO-0001"}})
	code, body := do(t, "POST", base[1]+plan.AgentCheckInPath, m[1], string(ci))
	var r plan.CheckInReply
	if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.Workflow == nil {
		t.Fatalf("a's token at b: %d %s", code, body)
	}
	if code, body := do(t, "POST", base[2]+plan.AgentCheckInPath, m[1], string(ci)); code != http.StatusUnauthorized || !strings.Contains(body, "the boot token was already used") {
		t.Errorf("a's token again, at c: %d %s", code, body)
	}

	// The session b opened takes the install's events at c.
	var evs []plan.AgentEvent
	for i, a := range r.Workflow.Actions {
		if plan.IsPowerAction(a.Action) {
			break
		}
		evs = append(evs, plan.AgentEvent{Seq: uint64(i + 1), Time: time.Now(), Type: plan.AgentActionDone, Step: i + 1, Steps: len(r.Workflow.Actions), Action: a.Action})
	}
	evs = append(evs, plan.AgentEvent{Seq: uint64(len(evs) + 1), Time: time.Now(), Type: plan.AgentProvisioned, Generation: r.Generation})
	batch, _ := json.Marshal(plan.EventBatch{Site: "lab", Node: "vm-serial", Events: evs})
	if code, body := do(t, "POST", base[2]+plan.AgentEventsPath, r.Session, string(batch)); code != 200 {
		t.Fatalf("the install's events at c, with b's session: %d %s", code, body)
	}

	// a never saw it provisioned: it sends it to its disk all the same.
	if _, script := do(t, "GET", base[0]+"/ipxe?serial=DEMO-0001", "", ""); !strings.Contains(script, "booting from its disk") || strings.Contains(script, "bootops.token") {
		t.Errorf("a's script for the node c saw provisioned:\n%s", script)
	}
	// vm-mac, installed while a was the site's one daemon: c sends it to
	// its disk (a brought its installs into the cluster).
	if _, script := do(t, "GET", base[2]+"/ipxe?mac=52:54:00:de:00:03", "", ""); !strings.Contains(script, "booting from its disk") {
		t.Errorf("c's script for vm-mac, installed before a joined:\n%s", script)
	}

	// Every member's timeline of vm-serial is the site's: the script a
	// served, the check-in b answered, the install c was told of; its
	// state is provisioned on each.
	for i, name := range []string{"a", "b", "c"} {
		var tl []status.Event
		if !testutil.Poll(30*time.Second, 100*time.Millisecond, func() bool {
			_, body := do(t, "GET", base[i]+"/api/v1/events?site=lab&node=vm-serial", "", "")
			tl = nil
			json.Unmarshal([]byte(body), &tl)
			var script, checkin, provisioned bool
			for _, e := range tl {
				script = script || e.Kind == status.KindScript
				checkin = checkin || e.Kind == status.KindAgent && e.State == status.StateMicroOS
				provisioned = provisioned || e.State == status.StateProvisioned
			}
			return script && checkin && provisioned
		}) {
			t.Errorf("%s's timeline of vm-serial lacks another member's events (a's script, b's check-in, c's install):\n%+v", name, tl)
		}
	}

	// The status document says what the member asked sees.
	code, body = do(t, "GET", base[1]+"/api/v1/status", "", "")
	var doc struct {
		Cluster *struct {
			Member, Leader string
			Size           int
			Quorum         bool
			Members        []struct{ Name string }
			Serving        map[string]string
		} `json:"cluster"`
	}
	if code == 200 {
		json.Unmarshal([]byte(body), &doc)
	}
	// Each member serves the same revision, and says so.
	if !testutil.Poll(20*time.Second, 100*time.Millisecond, func() bool {
		_, body := do(t, "GET", base[1]+"/api/v1/status", "", "")
		json.Unmarshal([]byte(body), &doc)
		sv := doc.Cluster.Serving
		return doc.Cluster != nil && len(sv) == 3 && sv["a"] != "" && sv["a"] == sv["b"] && sv["b"] == sv["c"]
	}) {
		t.Errorf("the revisions the members serve, as b says: %+v", doc.Cluster)
	}
	if c := doc.Cluster; c == nil || c.Member != "b" || c.Size != 3 || !c.Quorum || c.Leader == "" || len(c.Members) != 2 {
		t.Errorf("b's status document: %d %+v", code, doc.Cluster)
	}
	if st := logs[0].String(); !strings.Contains(st, "cluster: a member") {
		t.Errorf("a's log does not say it joined:\n%s", testutil.Tail(st, 20))
	}
}
