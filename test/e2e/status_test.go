//go:build e2e

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
)

// statusClient reads a daemon's status API: GET /api/v1/status (every
// node and unknown machine, where each stands) and GET /api/v1/events (a
// machine's timeline), decoded into the types the daemon serves them from,
// bhttp.StatusDoc and status.Event. The daemon listens only inside the
// lab's namespace, which the test process is not in: each read runs the
// bootops CLI there, whose `status -o json` prints the status document as
// served (with ?inventory=1) and `logs KEY -o json` the events as served.
type statusClient struct {
	t      *testing.T
	ns     string // the lab's namespace
	server string // the daemon's URL, url4 or url6
}

// api is the status API of the lab's daemon at server (url4, url6).
func (l *lab) api(t *testing.T, server string) statusClient {
	return statusClient{t: t, ns: l.lan, server: server}
}

// doc is the status document.
func (c statusClient) doc() bhttp.StatusDoc {
	c.t.Helper()
	out := run(c.t, "ip", "netns", "exec", c.ns, bootops, "status", "--server", c.server, "-o", "json")
	var doc bhttp.StatusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		c.t.Fatalf("GET %s/api/v1/status: %v\n%s", c.server, err, out)
	}
	return doc
}

// machine is the node or unknown machine whose key is key (site/node,
// mac:…), and whether the status has it.
func (c statusClient) machine(key string) (status.Machine, bool) {
	c.t.Helper()
	doc := c.doc()
	for _, list := range [][]status.Machine{doc.Nodes, doc.Machines} {
		for _, m := range list {
			if m.Key == key {
				return m, true
			}
		}
	}
	return status.Machine{}, false
}

// timeline is a machine's events, oldest first, and their JSON as the CLI
// printed them (what a failure shows, and what some checks search).
func (c statusClient) timeline(key string) ([]status.Event, string) {
	c.t.Helper()
	js := run(c.t, "ip", "netns", "exec", c.ns, bootops, "logs", key, "-o", "json", "--server", c.server)
	var evs []status.Event
	if err := json.Unmarshal([]byte(js), &evs); err != nil {
		c.t.Fatalf("GET %s/api/v1/events?key=%s: %v\n%s", c.server, key, err, js)
	}
	return evs, js
}

// status is the status document of the daemon on the IPv4 LAN.
func (l *lab) status() bhttp.StatusDoc { return l.api(l.t, url4).doc() }

// machine is a machine's entry in the status of the daemon on the IPv4
// LAN, and whether it is there.
func (l *lab) machine(key string) (status.Machine, bool) { return l.api(l.t, url4).machine(key) }

// nodeState is a machine's state and its last event's message, from the
// daemon on the IPv4 LAN ("", "" when the status does not have it).
func nodeState(l *lab, key string) (state, msg string) { return nodeStateAt(l.t, l, url4, key) }

// nodeStateAt is nodeState asked at server.
func nodeStateAt(t *testing.T, l *lab, server, key string) (state, msg string) {
	t.Helper()
	m, _ := l.api(t, server).machine(key)
	return m.State, m.Last.Message
}

// waitState waits (at most d, asking every 2 s) until the machine is in
// state want, and returns its last message then; it fails the test with
// the daemon's log when it never is.
func waitState(t *testing.T, l *lab, key, want string, d time.Duration) string {
	t.Helper()
	var state, msg string
	if testutil.Poll(d, every, func() bool { state, msg = nodeState(l, key); return state == want }) {
		return msg
	}
	t.Fatalf("%s: state %q (%s), want %q after %s\nbootops log:\n%s", key, state, msg, want, d, testutil.Tail(l.log("bootops"), 30))
	return ""
}

// timeline is a machine's events on the IPv4 LAN's daemon.
func timeline(t *testing.T, l *lab, key string) []status.Event {
	t.Helper()
	evs, _ := l.api(t, url4).timeline(key)
	return evs
}

// events is a machine's timeline asked at server, and its JSON.
func events(t *testing.T, l *lab, server, key string) ([]status.Event, string) {
	t.Helper()
	return l.api(t, server).timeline(key)
}

// messages are the events' messages, in their order.
func messages(evs []status.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Message)
	}
	return out
}

// sameEvent reports whether a and b are one event as a timeline shows it:
// its time, kind, message, the agent's sequence number and the address.
func sameEvent(a, b status.Event) bool {
	return a.Time.Equal(b.Time) && a.Kind == b.Kind && a.Message == b.Message && a.Seq == b.Seq && a.IP == b.IP
}

// states lists each machine of doc as key=state, for a failure's message.
func states(doc bhttp.StatusDoc) string {
	var out []string
	for _, m := range append(doc.Nodes, doc.Machines...) {
		out = append(out, m.Key+"="+m.State)
	}
	return strings.Join(out, " ")
}
