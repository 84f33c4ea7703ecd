package redfishvm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"syscall"
	"time"
)

// media is the virtual CD: the image's URL and the file it was
// downloaded to.
type media struct {
	Image    string
	Inserted bool
	file     string
}

func (b *BMC) cd() map[string]any {
	b.mu.Lock()
	m := b.media
	b.mu.Unlock()
	var image, name any // null when empty
	via := "NotConnected"
	if m.Inserted {
		image, name, via = m.Image, path.Base(m.Image), "URI"
	}
	return map[string]any{
		"@odata.type":    virtualMediaType,
		"@odata.id":      cdPath,
		"Id":             "Cd",
		"Name":           "Virtual CD",
		"MediaTypes":     []string{"CD", "DVD"},
		"Image":          image,
		"ImageName":      name,
		"ConnectedVia":   via,
		"Inserted":       m.Inserted,
		"WriteProtected": true,
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]any{"target": insertPath},
			"#VirtualMedia.EjectMedia":  map[string]any{"target": ejectPath},
		},
	}
}

// insertMedia answers VirtualMedia.InsertMedia: the image downloaded and
// put in the machine's CD drive. A CD already inserted is ejected first,
// as real BMCs want it.
func (b *BMC) insertMedia(q *request) {
	var in struct {
		Image          string
		Inserted       *bool
		WriteProtected *bool
	}
	if !q.decode(&in) {
		return
	}
	q.say("%s", in.Image)
	if in.Inserted != nil && !*in.Inserted || in.WriteProtected != nil && !*in.WriteProtected {
		q.fail(http.StatusBadRequest, "ActionParameterNotSupported", "This CD is inserted when asked and always write-protected.")
		return
	}
	b.order.Lock()
	defer b.order.Unlock()
	b.mu.Lock()
	inserted := b.media.Inserted
	b.mu.Unlock()
	if inserted {
		q.fail(http.StatusConflict, "ResourceInUse", "A medium is inserted: eject it first.")
		return
	}
	b.insert(q, in.Image)
}

// insert downloads image and puts it in the machine's CD drive,
// replacing what is there, and answers; b.order is held.
func (b *BMC) insert(q *request, image string) {
	ctx, cancel := b.orderContext(q.r)
	defer cancel()
	file, err := b.download(ctx, image)
	if err != nil {
		q.fail(http.StatusBadRequest, "ActionParameterValueError", "The image could not be had: %v", err)
		return
	}
	if err := b.cfg.Machine.Insert(ctx, file); err != nil {
		os.Remove(file)
		q.fail(http.StatusInternalServerError, "InternalError", "insert: %v", err)
		return
	}
	b.mu.Lock()
	old := b.media.file
	b.media = media{Image: image, Inserted: true, file: file}
	b.mu.Unlock()
	if old != "" {
		os.Remove(old)
	}
	q.done()
}

// ejectMedia answers VirtualMedia.EjectMedia; an empty drive is no
// error.
func (b *BMC) ejectMedia(q *request) {
	b.order.Lock()
	defer b.order.Unlock()
	b.eject(q)
}

// eject empties the machine's CD drive and answers; b.order is held.
func (b *BMC) eject(q *request) {
	ctx, cancel := b.orderContext(q.r)
	defer cancel()
	if err := b.cfg.Machine.Eject(ctx); err != nil {
		q.fail(http.StatusInternalServerError, "InternalError", "eject: %v", err)
		return
	}
	b.mu.Lock()
	old := b.media.file
	b.media = media{}
	b.mu.Unlock()
	if old != "" {
		os.Remove(old)
	}
	q.done()
}

// patchMedia answers a PATCH of the CD, as some clients insert and
// eject: Image (and Inserted true) inserts, replacing what is there;
// Image null or empty, or Inserted false, ejects.
func (b *BMC) patchMedia(q *request) {
	var in struct {
		Image    *string
		Inserted *bool
	}
	if !q.decode(&in) {
		return
	}
	b.order.Lock()
	defer b.order.Unlock()
	switch {
	case in.Inserted != nil && !*in.Inserted, in.Image != nil && *in.Image == "":
		q.say("eject")
		b.eject(q)
	case in.Image != nil:
		q.say("%s", *in.Image)
		b.insert(q, *in.Image)
	default:
		q.fail(http.StatusBadRequest, "PropertyMissing", "Give Image to insert, or Inserted false to eject.")
	}
}

// download fetches the image at raw into a file of MediaDir, within
// DownloadTimeout and MaxImage bytes.
func (b *BMC) download(ctx context.Context, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http or https URL", raw)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DownloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return "", err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", raw, resp.Status)
	}
	max := b.cfg.MaxImage
	if resp.ContentLength > max {
		return "", fmt.Errorf("GET %s: %d bytes, more than the %d this BMC takes", raw, resp.ContentLength, max)
	}
	f, err := os.CreateTemp(b.cfg.MediaDir, "image-*.iso")
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, max+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > max {
		err = fmt.Errorf("more than the %d bytes this BMC takes", max)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("GET %s: %w", raw, err)
	}
	return f.Name(), nil
}

// downloadClient fetches images from the addresses allow allows, and no
// other, redirects included: every connection's address is checked as
// it is made. It does not verify certificates (VerifyCertificate false,
// as BMCs ship) and uses no proxy.
func downloadClient(allow func(netip.Addr) bool) *http.Client {
	d := &net.Dialer{
		Timeout: 10 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if !allow(ap.Addr().Unmap()) {
				return errors.New("this BMC fetches images only from loopback or the tests' networks, not " + ap.Addr().String())
			}
			return nil
		},
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:     d.DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
}
