package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
)

// A node's recovery key escrow reaches the hub over the wire (the site's
// outbox, its forwarder, the site's stream, the view) as it left the
// node: the value the hub keeps and serves is exactly the armored
// ciphertext the agent sent. The hub's status and timeline carry none of
// it; its recovery-keys route serves it, and says 404 of a node it does
// not know.
func TestHubKeepsEscrows(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubs, kps := siteKeys(t, "north")
	hubs := cluster(t, ctx, 1, pubs)
	st, err := status.Open(filepath.Join(t.TempDir(), "status.db"), status.Options{Outbox: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const ciphertext = "-----BEGIN AGE ENCRYPTED FILE-----\n" +
		"YWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IFgyNTUxOSBzdGFuemEgb2YgYSB0ZXN0\n" +
		"-----END AGE ENCRYPTED FILE-----\n"
	esc := &status.Escrow{Generation: 4, Install: "sha256:ab", InstallID: "i1", Partition: 2, LUKSUUID: "0c5ae3a1-7f0e",
		Recipients: []string{"age1qqq", "age1ppp"}, Ciphertext: ciphertext, Time: time.Now().UTC()}
	if err := st.RecordSync(
		status.Event{Kind: status.KindAgent, Site: "north", Node: "n1", Seq: 7, Message: "recovery key escrowed (partition 2, LUKS 0c5ae3a1-7f0e, to 2 recipients)", Escrow: esc},
		status.Event{Kind: status.KindAgent, Site: "north", Node: "n1", Seq: 8, Message: "done"},
	); err != nil {
		t.Fatal(err)
	}
	seed, _ := kps["north"].Seed()
	f := &Forwarder{Site: "north", URLs: []string{"nats://" + hubs[0].cfg.Listen}, Seed: seed, Outbox: st}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.Run(fctx) }()
	defer func() { stop(); <-done }()
	v := hubs[0].View
	if !testutil.Poll(30*time.Second, 50*time.Millisecond, func() bool { return len(v.Events("north/n1")) == 2 }) {
		t.Fatalf("%d events of the site in the hub's view, want 2", len(v.Events("north/n1")))
	}

	es, known := v.Escrows("north", "n1")
	if !known || len(es) != 1 {
		t.Fatalf("the hub's escrows of north/n1: %+v (known %v)", es, known)
	}
	if es[0].Ciphertext != ciphertext {
		t.Errorf("the hub keeps %q, not the ciphertext the node sent", es[0].Ciphertext)
	}
	if es[0].Site != "north" || es[0].Node != "n1" || es[0].LUKSUUID != esc.LUKSUUID || es[0].Generation != 4 || len(es[0].Recipients) != 2 {
		t.Errorf("the hub's escrow: %+v", es[0])
	}
	for what, v := range map[string]any{"status": v.DocOf("hub", ""), "timeline": v.Events("north/n1")} {
		if b, _ := json.Marshal(v); strings.Contains(string(b), "YWdlLWVu") {
			t.Errorf("the hub's %s carries the ciphertext: %.300s", what, b)
		}
	}

	srv := httptest.NewServer(func() http.Handler {
		mux := http.NewServeMux()
		mux.Handle("GET /api/v1/recovery-keys/{site}/{node}", bhttp.RecoveryKeysHandler(v.Escrows))
		return mux
	}())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/recovery-keys/north/n1")
	if err != nil {
		t.Fatal(err)
	}
	var rk bhttp.RecoveryKeys
	if err := json.NewDecoder(resp.Body).Decode(&rk); err != nil || resp.StatusCode != 200 || len(rk.Escrows) != 1 || rk.Escrows[0].Ciphertext != ciphertext {
		t.Errorf("GET the hub's recovery keys: %d %+v %v", resp.StatusCode, rk, err)
	}
	resp.Body.Close()
	for _, path := range []string{"/api/v1/recovery-keys/north/nobody", "/api/v1/recovery-keys/south/n1"} {
		if resp, err := http.Get(srv.URL + path); err != nil || resp.StatusCode != 404 {
			t.Errorf("GET %s: %v %v, want 404", path, resp, err)
		} else {
			resp.Body.Close()
		}
	}
}
