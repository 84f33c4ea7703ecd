package redfishvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQEMU answers QMP on a unix socket as QEMU does: the greeting, then
// each command by script (its reply, and events sent before it), and
// ends the connection on "quit".
func fakeQEMU(t *testing.T, script map[string]string) (string, chan string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	seen := make(chan string, 100)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}` + "\r\n"))
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			var req struct {
				Execute string          `json:"execute"`
				ID      json.RawMessage `json:"id"`
			}
			json.Unmarshal(sc.Bytes(), &req)
			seen <- req.Execute
			if req.Execute == "quit" {
				return
			}
			reply, ok := script[req.Execute]
			if !ok {
				reply = `{"error": {"class": "CommandNotFound", "desc": "The command ` + req.Execute + ` has not been found"}}`
			}
			for _, line := range strings.Split(reply, "\n") {
				if req.ID != nil && !strings.Contains(line, `"event"`) {
					line = strings.TrimSuffix(line, "}") + `, "id": ` + string(req.ID) + "}"
				}
				c.Write([]byte(line + "\r\n"))
			}
		}
	}()
	return sock, seen
}

// The client agrees the capabilities, matches replies to commands,
// keeps the events sent between them, says which command QEMU refused,
// and ends when QEMU goes.
func TestQMPClient(t *testing.T) {
	sock, seen := fakeQEMU(t, map[string]string{
		"qmp_capabilities": `{"return": {}}`,
		"query-status":     `{"return": {"status": "running", "running": true}}`,
		"system_reset": `{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RESET", "data": {"guest": false, "reason": "host-qmp-system-reset"}}
{"return": {}}`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var status struct {
		Status  string
		Running bool
	}
	if err := q.Execute(ctx, "query-status", nil, &status); err != nil || status.Status != "running" || !status.Running {
		t.Fatalf("query-status: %+v %v", status, err)
	}
	since := len(q.Events())
	if err := q.Execute(ctx, "system_reset", nil, nil); err != nil {
		t.Fatal(err)
	}
	i, ev, err := q.WaitEvent(ctx, "RESET", since)
	if err != nil || i != 0 || !strings.Contains(string(ev.Data), "host-qmp-system-reset") || ev.Timestamp.Seconds != 1 {
		t.Errorf("RESET: %d %+v %v", i, ev, err)
	}
	err = q.Execute(ctx, "blockdev-change-medium", map[string]any{"id": "cd0"}, nil)
	var qe *QMPError
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" || err.Error() != "qmp blockdev-change-medium: CommandNotFound: The command blockdev-change-medium has not been found" {
		t.Errorf("a refused command: %v", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if _, _, err := q.WaitEvent(short, "SHUTDOWN", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an event that never comes: %v", err)
	}
	q.Execute(ctx, "quit", nil, nil)
	select {
	case <-q.Done():
	case <-ctx.Done():
		t.Fatal("the connection did not end when QEMU went")
	}
	if err := q.Execute(ctx, "query-status", nil, nil); err == nil || !strings.Contains(err.Error(), "connection ended") {
		t.Errorf("a command after QEMU went: %v", err)
	}
	var got []string
	for len(seen) > 0 {
		got = append(got, <-seen)
	}
	if strings.Join(got, " ") != "qmp_capabilities query-status system_reset blockdev-change-medium quit" {
		t.Errorf("QEMU was sent %q", got)
	}
}
