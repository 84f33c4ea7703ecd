package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/swarm"
)

// uplink talks to the boot server: the check-in, and the events, which it
// numbers, batches and resends until the server acknowledges them (the
// server acknowledges only what it stored durably). Its credential is the
// boot token until the check-in returns a session.
type uplink struct {
	server, site, node, machine string
	client                      *http.Client
	console                     io.Writer

	mu      sync.Mutex
	token   string
	seq     uint64
	pending []plan.AgentEvent
	kick    chan struct{}
	flushed chan struct{} // closed and replaced when pending empties
}

func newUplink(server, site, node, machine, token string, console io.Writer) *uplink {
	return &uplink{server: strings.TrimSuffix(server, "/"), site: site, node: node, machine: machine, token: token,
		client: &http.Client{Timeout: 30 * time.Second}, console: console,
		// Numbers unique across this node's boots: the server drops a
		// number it already stored as a resend.
		seq:  uint64(time.Now().UnixMicro()),
		kick: make(chan struct{}, 1), flushed: make(chan struct{})}
}

func (u *uplink) post(ctx context.Context, path string, in, out any) error {
	return u.do(ctx, http.MethodPost, path, in, out)
}

// do sends in (nothing for a GET) with the uplink's credential and reads
// the answer into out.
func (u *uplink) do(ctx context.Context, method, path string, in, out any) error {
	var payload io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		payload = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.server+path, payload)
	if err != nil {
		return err
	}
	u.mu.Lock()
	token := u.token
	u.mu.Unlock()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := u.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return &httpError{path: path, status: resp.Status, code: resp.StatusCode, body: strings.TrimSpace(string(body))}
	}
	return json.Unmarshal(body, out)
}

// httpError is a request the server answered with an error.
type httpError struct {
	path, status, body string
	code               int
}

func (e *httpError) Error() string { return fmt.Sprintf("%s: %s: %s", e.path, e.status, e.body) }

// checkIn reports who the machine is and gets its workflow.
func (u *uplink) checkIn(ctx context.Context, c plan.CheckIn) (plan.CheckInReply, error) {
	var r plan.CheckInReply
	c.Site, c.Node, c.Machine = u.site, u.node, u.machine
	err := u.post(ctx, plan.AgentCheckInPath, c, &r)
	if err == nil && r.Session != "" {
		u.mu.Lock()
		u.token = r.Session
		// A machine that checked in by its identity reports as the node
		// (or unknown machine) the server found.
		if r.Node != "" {
			u.node, u.machine = r.Node, ""
		} else if r.Machine != "" && u.node == "" {
			u.machine = r.Machine
		}
		u.mu.Unlock()
	}
	return r, err
}

// batchLen is how many of the pending events go in the next batch: at most
// plan.MaxEventBatch, and within plan.MaxEventBatchBytes by an estimate
// of their JSON (a message's escapes can double it), but always one.
func batchLen(pending []plan.AgentEvent) int {
	size := 0
	for i, e := range pending {
		size += 256 + 2*len(e.Message) + len(e.Action)
		if i == plan.MaxEventBatch || (i > 0 && size > plan.MaxEventBatchBytes) {
			return i
		}
	}
	return len(pending)
}

// Report queues an event; it never blocks on the network.
func (u *uplink) Report(e plan.AgentEvent) {
	u.mu.Lock()
	u.seq++
	e.Seq = u.seq
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if len(e.Message) > plan.MaxEventMessage {
		cut := plan.MaxEventMessage
		for cut > 0 && !utf8.RuneStart(e.Message[cut]) {
			cut--
		}
		e.Message = fmt.Sprintf("%s … [cut: %d more bytes]", e.Message[:cut], len(e.Message)-cut)
	}
	u.pending = append(u.pending, e)
	u.mu.Unlock()
	u.print(e)
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

func (u *uplink) print(e plan.AgentEvent) {
	step := ""
	if e.Steps > 0 {
		step = fmt.Sprintf("[%d/%d %s] ", e.Step, e.Steps, e.Action)
	}
	msg := e.Message
	if e.Type == plan.AgentProgress {
		msg = fmt.Sprintf("%d MB", e.Bytes>>20)
		if e.Total > 0 {
			msg += fmt.Sprintf(" of %d MB", e.Total>>20)
		}
	}
	fmt.Fprintf(u.console, "bootops-agent: %s%s %s\n", step, e.Type, msg)
}

// run sends what is pending until ctx ends: at once when something is
// queued, then again after a failure with a growing pause.
func (u *uplink) run(ctx context.Context) {
	wait := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.kick:
		case <-time.After(wait):
		}
		if err := u.send(ctx); err != nil {
			fmt.Fprintf(u.console, "bootops-agent: events not delivered yet: %v\n", err)
			wait = min(2*wait, 10*time.Second)
			continue
		}
		wait = time.Second
	}
}

func (u *uplink) send(ctx context.Context) error {
	for {
		u.mu.Lock()
		batch := append([]plan.AgentEvent(nil), u.pending[:batchLen(u.pending)]...)
		u.mu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		var ack plan.EventAck
		u.mu.Lock()
		eb := plan.EventBatch{Site: u.site, Node: u.node, Machine: u.machine, Events: batch}
		u.mu.Unlock()
		if err := u.post(ctx, plan.AgentEventsPath, eb, &ack); err != nil {
			return err
		}
		u.mu.Lock()
		i := 0
		for i < len(u.pending) && u.pending[i].Seq <= ack.Acked {
			i++
		}
		u.pending = u.pending[i:]
		if len(u.pending) == 0 {
			close(u.flushed)
			u.flushed = make(chan struct{})
		}
		u.mu.Unlock()
	}
}

// Flush waits until every event is acknowledged, or ctx ends: the Runner
// calls it before a power action, so nothing is lost when the machine goes.
func (u *uplink) Flush(ctx context.Context) error {
	for {
		u.mu.Lock()
		n, ch := len(u.pending), u.flushed
		u.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case u.kick <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d events not acknowledged: %w", n, ctx.Err())
		}
	}
}

// swarmLine is the uplink as the line to the server's swarms (SwarmClient).
type swarmLine struct{ u *uplink }

// query names the machine, as the session credential does.
func (l swarmLine) query() string {
	l.u.mu.Lock()
	defer l.u.mu.Unlock()
	return "?" + url.Values{"site": {l.u.site}, "node": {l.u.node}, "machine": {l.u.machine}}.Encode()
}

func (l swarmLine) Manifest(ctx context.Context, image string) (*swarm.Manifest, error) {
	m := new(swarm.Manifest)
	err := l.u.do(ctx, http.MethodGet, plan.AgentSwarmPath+image+"/manifest"+l.query(), nil, m)
	var he *httpError
	if errors.As(err, &he) && he.code == http.StatusServiceUnavailable {
		return nil, &swarm.PreparingError{}
	}
	return m, err
}

func (l swarmLine) Report(ctx context.Context, image string, r swarm.Report) (swarm.Reply, error) {
	var reply swarm.Reply
	err := l.u.do(ctx, http.MethodPost, plan.AgentSwarmPath+image+l.query(), r, &reply)
	return reply, err
}
