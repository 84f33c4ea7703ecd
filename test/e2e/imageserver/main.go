// Command imageserver serves OS images to the end-to-end VMs: a folder over
// HTTP with Range support, and, with -drop-after N, the first download of
// each file cut after N bytes (the connection closed mid-stream), so the
// agent's resume is exercised. It runs inside the test's namespace.
//
//	imageserver -dir DIR -addr 198.18.0.1:8081 [-drop-after 1048576]
//	imageserver -dir DIR -addr [2001:db8:1::1]:8080
//
// Each request's line in its log ends with the client's address (from=).
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

func main() {
	dir := flag.String("dir", ".", "folder to serve")
	addr := flag.String("addr", "127.0.0.1:8081", "listen address")
	dropAfter := flag.Int64("drop-after", 0, "cut the first download of each file after this many bytes (0: never)")
	rate := flag.Int("rate", 0, "send at most this many bytes per second per download (0: no limit)")
	selfSigned := flag.Bool("tls-self-signed", false, "serve HTTPS with a certificate of its own (the rogue server of the trusted-chain tests)")
	flag.Parse()
	var mu sync.Mutex
	dropped := map[string]bool{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := filepath.Join(*dir, filepath.Clean("/"+r.URL.Path))
		f, err := os.Open(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, _ := f.Stat()
		log.Printf("%s %s range=%q from=%s", r.Method, r.URL.Path, r.Header.Get("Range"), r.RemoteAddr)
		mu.Lock()
		drop := *dropAfter > 0 && !dropped[name] && r.Header.Get("Range") == ""
		dropped[name] = true
		mu.Unlock()
		if drop {
			// Headers for the whole file, then only part of it, then the
			// connection goes.
			w.Header().Set("Content-Length", fmt.Sprint(st.Size()))
			w.Header().Set("Accept-Ranges", "bytes")
			w.WriteHeader(http.StatusOK)
			buf := make([]byte, *dropAfter)
			n, _ := f.Read(buf)
			w.Write(buf[:n])
			w.(http.Flusher).Flush()
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				}
			}
			log.Printf("dropped %s after %d bytes", r.URL.Path, n)
			return
		}
		if *rate > 0 {
			w = &slowWriter{ResponseWriter: w, rate: *rate}
		}
		http.ServeContent(w, r, name, st.ModTime(), f)
	})
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if *selfSigned {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{selfSignedCert(*addr)}}
		log.Fatal(srv.ListenAndServeTLS("", ""))
	}
	log.Fatal(srv.ListenAndServe())
}

// selfSignedCert is a certificate for addr's host that no CA signed.
func selfSignedCert(addr string) tls.Certificate {
	host, _, _ := net.SplitHostPort(addr)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP(host)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// slowWriter sends at most rate bytes a second.
type slowWriter struct {
	http.ResponseWriter
	rate int
}

func (s *slowWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := min(len(p), s.rate/10+1)
		k, err := s.ResponseWriter.Write(p[:chunk])
		n += k
		if err != nil {
			return n, err
		}
		if f, ok := s.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		p = p[chunk:]
		time.Sleep(100 * time.Millisecond)
	}
	return n, nil
}
