package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
)

// Fetch copies the file at url to w through the download the image action
// streams its image with, and returns the bytes written and the file's
// sha256 (hex). A connection lost mid-body is resumed where it stopped
// (Range: bytes=N-, with If-Range naming the first answer's strong ETag or
// its Last-Modified, so a file changed meanwhile is refused, never
// spliced), up to 5 losses in a row without a byte getting through, the
// wait before each new request growing by DefaultBackoff. A connection
// that delivers nothing for 15 s counts as lost (a NAT that forgot it, a
// link down): it is dropped and the rest asked for. A failed first
// request is not retried: the action's retries do that, not the download.
//
// client nil is a client without an overall timeout, as the action's; log,
// when not nil, receives each loss and resume as the action logs them.
// Fetch checks no digest itself: the caller compares the one it returns.
func Fetch(ctx context.Context, client *http.Client, url string, w io.Writer, log func(string)) (int64, string, error) {
	if client == nil {
		client = &http.Client{}
	}
	if log == nil {
		log = func(string) {}
	}
	src := &download{ctx: ctx, client: client, url: url, delay: DefaultBackoff, log: log}
	if err := src.connect(); err != nil {
		return 0, "", err
	}
	defer src.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), src)
	if err != nil {
		return n, "", fmt.Errorf("fetch, after %d bytes: %w", n, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
