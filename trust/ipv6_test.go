package trust

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// The server's certificate names an IPv6 address (given as in a URL,
// with brackets) and an agent that reaches https://[::1]:port verifies it.
func TestServerCertificateForIPv6(t *testing.T) {
	dir := t.TempDir()
	if err := InitCA(dir, CAOptions{Hosts: []string{"198.18.0.1", "[::1]"}}); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFile))
	pool, err := PoolFromPEM(string(caPEM))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = ServerTLS(pair)
	srv.StartTLS()
	defer srv.Close()
	cli := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := cli.Get("https://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("https over [::1]: %v", err)
	}
	resp.Body.Close()
	leaf := pair.Leaf
	if leaf == nil || len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Errorf("certificate addresses: %v", leaf.IPAddresses)
	}
}
