// Package flood is what the LAN attackers of the tests and benchmarks
// (test/e2e/lanflood, test/bench/hostileflood) share: their source
// addresses, HTTP clients bound to one of them, and a request that says
// only its status and body.
package flood

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// Sources reads source addresses: "A,B,C" or "FIRST-LAST" (at most 256).
func Sources(s string) ([]string, error) {
	if first, last, ok := strings.Cut(s, "-"); ok {
		a, err1 := netip.ParseAddr(first)
		b, err2 := netip.ParseAddr(last)
		if err1 != nil || err2 != nil || b.Less(a) {
			return nil, fmt.Errorf("sources %q: want FIRST-LAST", s)
		}
		var out []string
		for ; a.Compare(b) <= 0 && len(out) < 256; a = a.Next() {
			out = append(out, a.String())
		}
		return out, nil
	}
	var out []string
	for _, a := range strings.Split(s, ",") {
		if _, err := netip.ParseAddr(a); err != nil {
			return nil, fmt.Errorf("sources: %q: %v", a, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// Client is an HTTP client whose connections leave from src, at most
// conns at once, each request within timeout.
func Client(src string, conns int, timeout time.Duration) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
}

// Do sends a request (v, when set, as its JSON body; token, when set, as
// its bearer) and returns the status and at most 1 MiB of the body.
func Do(ctx context.Context, c *http.Client, method, url, token string, v any) (int, string, error) {
	var body io.Reader
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return 0, "", err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if v != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), nil
}
