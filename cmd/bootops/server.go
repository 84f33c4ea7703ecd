package main

import (
	"flag"
	"fmt"
	"net"
	"strings"
)

// defaultServer is the daemon on this machine, as serve listens by default.
const defaultServer = "http://127.0.0.1:8080"

// serverValue is a --server flag: the daemon's (or a hub's) base URL.
// HOST:PORT alone is accepted, as operators type it: http://, or https://
// when the site CA is given (BOOTOPS_CA: a TLS daemon is meant).
type serverValue struct {
	url string
	tls bool
}

func (s *serverValue) String() string { return s.url }

func (s *serverValue) Set(v string) error {
	u, err := serverURL(v, s.tls)
	if err != nil {
		return err
	}
	s.url = u
	return nil
}

// serverFlag adds --server to fs, def its default ("" for none).
func serverFlag(fs *flag.FlagSet, e *env, def string) *string {
	s := &serverValue{url: def, tls: e.getenv("BOOTOPS_CA") != ""}
	fs.Var(s, "server", "the daemon's `URL`: http://HOST:PORT, https://HOST:PORT, or HOST:PORT (http, or https when BOOTOPS_CA is set)")
	return &s.url
}

// serverURL is a server address as a base URL without a trailing slash:
// a URL of http or https as it is, HOST:PORT (or HOST) with http:// in
// front, https:// when tls; "" stays "".
func serverURL(v string, tls bool) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if scheme, rest, ok := strings.Cut(v, "://"); ok {
		if scheme != "http" && scheme != "https" {
			return "", fmt.Errorf("%q: want http://HOST:PORT, https://HOST:PORT or HOST:PORT", v)
		}
		if rest == "" || strings.HasPrefix(rest, "/") {
			return "", fmt.Errorf("%q: no host: want %s://HOST:PORT", v, scheme)
		}
		return strings.TrimSuffix(v, "/"), nil
	}
	v = strings.TrimSuffix(v, "/")
	host := v
	if h, port, err := net.SplitHostPort(v); err == nil {
		if h == "" || port == "" {
			return "", fmt.Errorf("%q: want HOST:PORT (127.0.0.1:8080), or a URL (http://HOST:PORT)", v)
		}
		host = h
	}
	if host == "" || strings.ContainsAny(host, "/?#@ ") {
		return "", fmt.Errorf("%q: want HOST:PORT (127.0.0.1:8080), or a URL (http://HOST:PORT)", v)
	}
	if tls {
		return "https://" + v, nil
	}
	return "http://" + v, nil
}
