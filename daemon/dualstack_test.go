package daemon

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pin/tftp/v3"

	"github.com/bootops/bootops/internal/testutil"
)

// A dual-stack daemon: --http-addr and --tftp-addr name one address of
// each family, and both serve.
func TestRunListensOnBothFamilies(t *testing.T) {
	var log lockedBuffer
	cfg := demoConfig(t, &log)
	cfg.HTTP.Addr = "127.0.0.1:0, [::1]:0"
	ipxe := t.TempDir()
	efi := bytes.Repeat([]byte("ipxe"), 5000)
	if err := os.WriteFile(filepath.Join(ipxe, "ipxe.efi"), efi, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.TFTP = TFTPConfig{Addr: "127.0.0.1:0,[::1]:0", IPXEDir: ipxe}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var httpAddrs, tftpAddrs string
	testutil.Poll(10*time.Second, 10*time.Millisecond, func() bool {
		httpAddrs, tftpAddrs = log.field("http", "addrs"), log.field("serving", "tftp")
		return httpAddrs != "" && tftpAddrs != ""
	})
	hs, ts := strings.Split(httpAddrs, ","), strings.Split(tftpAddrs, ",")
	if len(hs) != 2 || len(ts) != 2 || !strings.HasPrefix(hs[1], "[::1]:") || !strings.HasPrefix(ts[1], "[::1]:") {
		t.Fatalf("http %q, tftp %q:\n%s", httpAddrs, tftpAddrs, log.String())
	}
	for _, a := range hs {
		resp, err := http.Get("http://" + a + "/ipxe?serial=DEMO-0001")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "#!ipxe") {
			t.Errorf("over %s: %d\n%s", a, resp.StatusCode, body)
		}
	}
	for _, a := range ts {
		c, err := tftp.NewClient(a)
		if err != nil {
			t.Fatal(err)
		}
		c.SetBlockSize(1400)
		wt, err := c.Receive("ipxe.efi", "octet")
		var got bytes.Buffer
		if err == nil {
			_, err = wt.WriteTo(&got)
		}
		if err != nil || !bytes.Equal(got.Bytes(), efi) {
			t.Errorf("tftp over %s: %v, %d bytes", a, err, got.Len())
		}
	}
}

func TestListenerAddresses(t *testing.T) {
	if got := strings.Join(Addrs(" :69, [::]:69 ,,"), "|"); got != ":69|[::]:69" {
		t.Errorf("Addrs: %q", got)
	}
	for addr, want := range map[string]string{":69": "udp4", "0.0.0.0:69": "udp4", "[::]:69": "udp6", "[2001:db8::1]:69": "udp6", "[fe80::1%eth0]:69": "udp6", "tftp.example:69": "udp4"} {
		if got := udpNetwork(addr); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
	if !httpsPortServed("127.0.0.1:8080,[::1]:8443", 8443) || httpsPortServed("[::1]:8080", 8443) {
		t.Error("httpsPortServed")
	}
}
