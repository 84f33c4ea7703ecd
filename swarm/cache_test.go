package swarm

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bootops/bootops/internal/testutil"
)

// An image is fetched once, checked, decompressed into a sparse raw file
// with its manifest, and found again on disk by a server that started
// afresh, without fetching it again; a file whose sha256 is not Git's is
// refused and not kept.
func TestCache(t *testing.T) {
	raw := bytes.Repeat([]byte("image "), 3*ChunkSize/6+100) // 3 chunks and a bit
	clear(raw[ChunkSize : 2*ChunkSize])                      // chunk 1 all zeros
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	sum := sha256.Sum256(gz.Bytes())
	good := hex.EncodeToString(sum[:])
	var fetched atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		w.Write(gz.Bytes())
	}))
	defer srv.Close()
	dir := t.TempDir()
	get := func(c *Cache, sha string) (im *Image, err error) {
		testutil.Poll(10*time.Second, 10*time.Millisecond, func() bool {
			im, err = c.Get(srv.URL+"/img.gz", sha, "gz")
			var prep *PreparingError
			return !errors.As(err, &prep)
		})
		return im, err
	}
	im, err := get(&Cache{Dir: dir}, good)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(im.Path)
	whole := sha256.Sum256(raw)
	if !bytes.Equal(b, raw) || im.Manifest.SHA256 != hex.EncodeToString(whole[:]) || im.Manifest.Chunks() != 4 || !im.Manifest.IsZero(1) || im.Manifest.IsZero(0) {
		t.Fatalf("the prepared image is not the raw image (manifest %+v)", im.Manifest)
	}
	again, err := (&Cache{Dir: dir}).Get(srv.URL+"/img.gz", good, "gz")
	if err != nil || again.Manifest.SHA256 != im.Manifest.SHA256 || fetched.Load() != 1 {
		t.Errorf("a new server's cache: %v, fetched %d times", err, fetched.Load())
	}
	bad := strings.Repeat("0", 64)
	if _, err := get(&Cache{Dir: dir}, bad); err == nil || !strings.Contains(err.Error(), "Git says "+bad+": not served to peers") {
		t.Errorf("a wrong sha256: %v", err)
	}
	if _, err := os.Stat(dir + "/" + bad + "/manifest.json"); !os.IsNotExist(err) {
		t.Errorf("a refused image left a manifest: %v", err)
	}
}
