package redfishvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// QMP is a client of QEMU's JSON monitor on a unix socket: the greeting,
// qmp_capabilities, then commands (one reply each, matched by id) and the
// events QEMU sends between them, all kept for whoever waits on one.
type QMP struct {
	conn net.Conn
	// wmu orders the writes; mu guards the rest.
	wmu     sync.Mutex
	mu      sync.Mutex
	nextID  int
	pending map[string]chan qmpMessage
	events  []Event
	arrived chan struct{} // closed, and made anew, when an event arrives
	done    chan struct{} // closed when the connection ends
	err     error         // why it ended
}

// Event is one QMP event ("RESET", "SHUTDOWN", "STOP", …).
type Event struct {
	Name      string          `json:"event"`
	Data      json.RawMessage `json:"data,omitempty"`
	Timestamp struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

// QMPError is a command QEMU refused.
type QMPError struct {
	Command string
	Class   string `json:"class"`
	Desc    string `json:"desc"`
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// qmpMessage is anything QEMU sends: a greeting, a reply, an error or an
// event.
type qmpMessage struct {
	Greeting json.RawMessage `json:"QMP,omitempty"`
	Return   json.RawMessage `json:"return,omitempty"`
	Error    *QMPError       `json:"error,omitempty"`
	ID       json.RawMessage `json:"id,omitempty"`
	Event    string          `json:"event,omitempty"`
}

// DialQMP connects to the QMP socket at path, reads QEMU's greeting and
// leaves the capabilities negotiation, within ctx.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	dec := json.NewDecoder(bufio.NewReader(conn))
	var greeting qmpMessage
	if err := dec.Decode(&greeting); err != nil || greeting.Greeting == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp %s: no greeting: %v", path, err)
	}
	if _, err := conn.Write([]byte(`{"execute":"qmp_capabilities"}` + "\n")); err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp %s: qmp_capabilities: %w", path, err)
	}
	var reply qmpMessage
	for reply.Return == nil && reply.Error == nil {
		// Events may come first; none is lost that matters before
		// the capabilities are agreed (QEMU sends none before).
		if err := dec.Decode(&reply); err != nil {
			conn.Close()
			return nil, fmt.Errorf("qmp %s: qmp_capabilities: %w", path, err)
		}
	}
	if reply.Error != nil {
		conn.Close()
		reply.Error.Command = "qmp_capabilities"
		return nil, reply.Error
	}
	conn.SetDeadline(time.Time{})
	q := &QMP{conn: conn, pending: map[string]chan qmpMessage{}, arrived: make(chan struct{}), done: make(chan struct{})}
	go q.read(dec)
	return q, nil
}

// read dispatches what QEMU sends until the connection ends.
func (q *QMP) read(dec *json.Decoder) {
	var err error
	for {
		var raw json.RawMessage
		if err = dec.Decode(&raw); err != nil {
			break
		}
		var m qmpMessage
		if err = json.Unmarshal(raw, &m); err != nil {
			break
		}
		q.mu.Lock()
		if m.Event != "" {
			var ev Event
			json.Unmarshal(raw, &ev)
			q.events = append(q.events, ev)
			close(q.arrived)
			q.arrived = make(chan struct{})
		} else if ch, ok := q.pending[string(m.ID)]; ok {
			delete(q.pending, string(m.ID))
			ch <- m // buffered: the waiter may have given up
		}
		q.mu.Unlock()
	}
	q.mu.Lock()
	q.err = fmt.Errorf("qmp: connection ended: %w", err)
	q.mu.Unlock()
	close(q.done)
}

// Execute runs cmd with args (nil for none) and decodes its return value
// into out (nil to drop it), waiting at most as long as ctx.
func (q *QMP) Execute(ctx context.Context, cmd string, args, out any) error {
	q.mu.Lock()
	q.nextID++
	id := fmt.Sprintf(`"%d"`, q.nextID)
	ch := make(chan qmpMessage, 1)
	q.pending[id] = ch
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		delete(q.pending, id)
		q.mu.Unlock()
	}()
	req := map[string]any{"execute": cmd, "id": json.RawMessage(id)}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	select {
	case <-q.done:
		return fmt.Errorf("qmp %s: %w", cmd, q.Err())
	default:
	}
	q.wmu.Lock()
	_, err = q.conn.Write(append(b, '\n'))
	q.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			m.Error.Command = cmd
			return m.Error
		}
		if out != nil {
			if err := json.Unmarshal(m.Return, out); err != nil {
				return fmt.Errorf("qmp %s: its return value: %w", cmd, err)
			}
		}
		return nil
	case <-q.done:
		return fmt.Errorf("qmp %s: %w", cmd, q.Err())
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", cmd, ctx.Err())
	}
}

// Events are the events received so far, oldest first.
func (q *QMP) Events() []Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]Event(nil), q.events...)
}

// WaitEvent waits for an event called name, the since-th received or a
// later one (since is len(Events()) taken before the command that causes
// it), and returns its index with it.
func (q *QMP) WaitEvent(ctx context.Context, name string, since int) (int, Event, error) {
	for {
		q.mu.Lock()
		for i := since; i < len(q.events); i++ {
			if q.events[i].Name == name {
				ev := q.events[i]
				q.mu.Unlock()
				return i, ev, nil
			}
		}
		arrived := q.arrived
		q.mu.Unlock()
		select {
		case <-arrived:
		case <-q.done:
			return 0, Event{}, fmt.Errorf("qmp: waiting for %s: %w", name, q.Err())
		case <-ctx.Done():
			return 0, Event{}, fmt.Errorf("qmp: waiting for %s: %w", name, ctx.Err())
		}
	}
}

// Done is closed when the connection ends (QEMU quit or died).
func (q *QMP) Done() <-chan struct{} { return q.done }

// Err says why the connection ended (nil while it lasts).
func (q *QMP) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Close ends the connection.
func (q *QMP) Close() error {
	err := q.conn.Close()
	<-q.done
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
