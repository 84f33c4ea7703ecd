package main

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
)

// status --wait asks until the revision is served; each reply stands on
// its own: a node whose power the last reply omits shows none, not the
// power an earlier reply gave the node in its row.
func TestStatusWaitDoesNotCarryAnEarlierReply(t *testing.T) {
	replies := []string{
		`{"source":{"applied":{"revision":"aaaa"}},"nodes":[{"node":"n1","site":"lab","state":"provisioned","power":"on"},{"node":"n2","site":"lab","state":"provisioned","power":"off"}]}`,
		`{"source":{"applied":{"revision":"bbbb"}},"nodes":[{"node":"n3","site":"lab","state":"provisioned"},{"node":"n2","site":"lab","state":"provisioned","power":"off"}]}`,
	}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := min(int(n.Add(1))-1, len(replies)-1)
		w.Write([]byte(replies[i]))
	}))
	defer srv.Close()
	code, out, errs := bootops(t, nil, "status", "--server", srv.URL, "--wait", "bbbb", "--timeout", "10s")
	if code != 0 || n.Load() < 2 {
		t.Fatalf("status --wait: %d after %d replies %s", code, n.Load(), errs)
	}
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "n3 ") {
			row = l
		}
	}
	f := strings.Fields(row)
	if len(f) < 9 || f[8] != "-" || strings.Contains(out, "n1 ") {
		t.Errorf("n3's POWER is not \"-\" (a row of the first reply?):\n%s", out)
	}
}

// A held node's reason is printed whole, below the table, whatever its
// last event says.
func TestStatusSaysWhyHeld(t *testing.T) {
	why := "install: hold (sites/lab/nodes/c-good.yaml:6): it waits until a commit says install: auto"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"source":{"applied":{"revision":"aaaa"}},"nodes":[` +
			`{"node":"c-good","site":"lab","state":"held","held":"` + why + `","last":{"message":"inventory recorded"}},` +
			`{"node":"c-bad","site":"lab","state":"held","held":"x\u001b[2J"},` +
			`{"node":"c-done","site":"lab","state":"provisioned"}]}`))
	}))
	defer srv.Close()
	code, out, errs := bootops(t, nil, "status", "--server", srv.URL)
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	_, after, ok := strings.Cut(out, "\nheld:\n")
	if !ok || !strings.Contains(after, "lab/c-good  "+why+"\n") || strings.Contains(after, "c-done") || strings.Contains(out, "\x1b") {
		t.Errorf("status does not say why c-good is held, or says it of c-done, or prints an escape:\n%s", out)
	}
}

// A site of more than one daemon: one line says the member asked, the
// leader, the majority, who answers DHCP and the others' state.
func TestStatusSaysTheCluster(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"source":{"applied":{"revision":"aaaa"}},"cluster":{"member":"b","leader":"c","size":3,"quorum":true,` +
			`"members":[{"name":"a","current":false,"offline":true},{"name":"c","current":true}],"roles":{"dhcp.lab":"c"}},"nodes":[]}`))
	}))
	defer srv.Close()
	_, out, _ := bootops(t, nil, "status", "--server", srv.URL)
	if !strings.Contains(out, "cluster:  member b of 3, leader c, with a majority; dhcp.lab: c; a offline; c current\n") {
		t.Errorf("status:\n%s", out)
	}
}

// A hub's status: a site of more than one daemon shows how many of its
// members are up, and its cluster's line.
func TestStatusSaysASitesMembers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"sites":[{"name":"lab","daemon":"m2","events":7,"cluster":{"member":"m2","leader":"m1","size":3,"quorum":true,` +
			`"members":[{"name":"m1","current":true},{"name":"m3","offline":true}],"roles":{"dhcp.lab":"m2"}}},{"name":"east","daemon":"e1"}],"nodes":[]}`))
	}))
	defer srv.Close()
	_, out, _ := bootops(t, nil, "status", "--server", srv.URL)
	if !regexp.MustCompile(`(?m)^lab +never +m2 +2 of 3 up `).MatchString(out) || !regexp.MustCompile(`(?m)^east +never +e1 +- `).MatchString(out) ||
		!strings.Contains(out, "lab cluster:  member m2 of 3, leader m1, with a majority; dhcp.lab: m2; m1 current; m3 offline\n") {
		t.Errorf("a hub's status:\n%s", out)
	}
}

// The revision each member of a site's cluster serves: one when they
// agree, each member's when they do not.
func TestStatusSaysWhatEachMemberServes(t *testing.T) {
	serving := `{"a":"1111111111111111111111111111111111111111","b":"1111111111111111111111111111111111111111"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"cluster":{"member":"a","leader":"a","size":2,"quorum":true,"members":[{"name":"b","current":true}],"serving":` + serving + `},"nodes":[]}`))
	}))
	defer srv.Close()
	if _, out, _ := bootops(t, nil, "status", "--server", srv.URL); !strings.Contains(out, "; b current; serving 111111111111\n") {
		t.Errorf("members serving one revision:\n%s", out)
	}
	serving = `{"a":"1111111111111111111111111111111111111111","b":"2222222222222222222222222222222222222222"}`
	if _, out, _ := bootops(t, nil, "status", "--server", srv.URL); !strings.Contains(out, "; NOT THE SAME REVISION: a 111111111111, b 222222222222\n") {
		t.Errorf("members serving two revisions:\n%s", out)
	}
}
