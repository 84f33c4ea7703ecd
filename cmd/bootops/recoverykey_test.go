package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
)

// identityFile writes id as age-keygen does and returns its path.
func identityFile(t *testing.T, id *age.X25519Identity) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "key.txt")
	if err := os.WriteFile(f, []byte("# created: now\n# public key: "+id.Recipient().String()+"\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// bootops recovery-key fetches a node's escrows from the daemon with the
// operator's token and decrypts one here with a real age identity: the
// key alone on stdout. The newest escrow, or the one of a LUKS UUID or a
// partition; an identity none of the recipients matches, a node without
// escrows, a reader's token, and a ciphertext that decrypts to what is no
// key each fail, saying why, with nothing on stdout.
func TestRecoveryKeyCommand(t *testing.T) {
	alice, _ := age.GenerateX25519Identity()
	mallory, _ := age.GenerateX25519Identity()
	esc := func(uuid, key string, gen int) status.Escrow {
		return status.Escrow{Site: "lab", Node: "n1", Generation: gen, Partition: 2, LUKSUUID: uuid, Recipients: []string{alice.Recipient().String()},
			Ciphertext: testutil.AgeArmor(t, alice.Recipient(), key), Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	}
	escrows := map[string][]status.Escrow{
		"lab/n1": {esc("2222", "new-key-of-generation-3\n", 3), esc("1111", "old-key-of-generation-2", 2)},
		"lab/n2": {esc("3333", "\x1b]52;c;cGFzdGU=\x07", 1)},
		"lab/n3": nil,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/status", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"plan":"p","nodes":[{"key":"lab/n1","site":"lab","node":"n1","state":"running"}],"unknown":[]}`)
	})
	keys := bhttp.RecoveryKeysHandler(func(site, node string) ([]status.Escrow, bool) {
		es, ok := escrows[site+"/"+node]
		return es, ok
	})
	mux.HandleFunc("GET /api/v1/recovery-keys/{site}/{node}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer operate-token" {
			http.Error(w, "the credential does not give the operate role", http.StatusForbidden)
			return
		}
		keys.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	aliceFile, malloryFile := identityFile(t, alice), identityFile(t, mallory)
	op := map[string]string{"BOOTOPS_TOKEN": "operate-token"}

	for _, c := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		out    string
		errHas string
	}{
		{"the newest", op, []string{"n1", "--identity", aliceFile}, 0, "new-key-of-generation-3\n", "partition 2, LUKS 2222, install of generation 3"},
		{"by LUKS UUID, with --site", op, []string{"n1", "--site", "lab", "--identity", aliceFile, "--luks-uuid", "1111"}, 0, "old-key-of-generation-2\n", "LUKS 1111"},
		{"by partition", op, []string{"lab/n1", "--identity", aliceFile, "--partition", "2"}, 0, "new-key-of-generation-3\n", ""},
		{"no such partition", op, []string{"lab/n1", "--identity", aliceFile, "--partition", "3"}, 1, "", "no escrow of that partition or container; it keeps: partition 2 LUKS 2222"},
		{"another identity", op, []string{"lab/n1", "--identity", malloryFile}, 1, "", "none of the escrow's 1 recipients (" + alice.Recipient().String() + ") matches the identity in " + malloryFile},
		{"not an identity file", op, []string{"lab/n1", "--identity", notAnIdentity(t)}, 1, "", "not an age identity file"},
		{"no escrow", op, []string{"lab/n3", "--identity", aliceFile}, 1, "", "node lab/n3 has no escrowed recovery key"},
		{"no such node", op, []string{"lab/n9", "--identity", aliceFile}, 1, "", "404"},
		{"a reader", map[string]string{"BOOTOPS_TOKEN": "read-token"}, []string{"lab/n1", "--identity", aliceFile}, 1, "", "does not give the operate role"},
		{"what is no key", op, []string{"lab/n2", "--identity", aliceFile}, 1, "", "no recovery key (empty, over 4096 bytes, or not printable text): not printed"},
		{"no identity", op, []string{"lab/n1"}, 2, "", "--identity FILE"},
		{"no token", nil, []string{"lab/n1", "--identity", aliceFile}, 2, "", "operator token"},
	} {
		code, out, errs := bootops(t, c.env, append([]string{"recovery-key", "--server", srv.URL}, c.args...)...)
		if code != c.code || out != c.out || !strings.Contains(errs, c.errHas) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q, saying %q", c.name, code, out, errs, c.code, c.out, c.errHas)
		}
	}
	if code, out, _ := bootops(t, nil, "recovery-key", "--help"); code != 0 || !strings.Contains(out, "bootops recovery-key rack1-12 --identity") {
		t.Errorf("--help: %d %s", code, out)
	}
}

// notAnIdentity is a file that is no age identity.
func notAnIdentity(t *testing.T) string {
	f := filepath.Join(t.TempDir(), "id_ed25519")
	os.WriteFile(f, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nnot one\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600)
	return f
}
