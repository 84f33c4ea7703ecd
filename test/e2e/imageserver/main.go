// Command imageserver serves OS images to the end-to-end VMs: a folder over
// HTTP with Range support, and, with -drop-after N, the first download of
// each file cut after N bytes (the connection closed mid-stream), so the
// agent's resume is exercised. It runs inside the test's namespace.
//
//	imageserver -dir DIR -addr 198.18.0.1:8081 [-drop-after 1048576]
package main

import (
	"flag"
	"fmt"
	"log"
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
		log.Printf("%s %s range=%q", r.Method, r.URL.Path, r.Header.Get("Range"))
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
		http.ServeContent(w, r, name, st.ModTime(), f)
	})
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
