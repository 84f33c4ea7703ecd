package power

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"

	"github.com/bootops/bootops/plan"
)

// MediaController is a Controller whose BMC has virtual media: a Redfish
// BMC's virtual CD.
type MediaController interface {
	Controller
	// SetVirtualMedia puts the image at imageURL into the BMC's virtual
	// CD, ejecting what is there first; "" only ejects.
	SetVirtualMedia(ctx context.Context, imageURL string) error
}

// DefaultMediaTimeout bounds a virtual media call: a BMC may fetch the
// whole image before it answers.
const DefaultMediaTimeout = 2 * time.Minute

// ErrNoMedia is virtual media asked of a node whose BMC has none.
var ErrNoMedia = errors.New("the node's bmc has no virtual media (it needs protocol redfish)")

// SetVirtualMedia goes through bmclib's Redfish provider (gofish), which
// finds the CD among the manager's virtual media (or the system's),
// ejects what is inserted and inserts the image (InsertMedia).
func (x *bmcLib) SetVirtualMedia(ctx context.Context, imageURL string) error {
	what := "virtual media insert " + redactURL(imageURL)
	if imageURL == "" {
		what = "virtual media eject"
	}
	if x.b.Protocol != plan.BMCRedfish {
		return fmt.Errorf("%s: BMC %s (%s): %w", what, x.b.Host(), x.b.Protocol, ErrNoMedia)
	}
	return x.do(ctx, what, func(ctx context.Context, cl *bmclib.Client) error {
		ok, err := cl.SetVirtualMedia(ctx, "CD", imageURL)
		if err == nil && !ok {
			err = errors.New("the BMC did not accept it")
		}
		return err
	})
}

// checkImageURL says what is wrong with an image's URL for a BMC to
// fetch: an absolute http or https URL, without a user or password (the
// BMC shows the URL to whoever reads its virtual media).
func checkImageURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("image URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("image URL %q: want an http:// or https:// URL the BMC can fetch", redactURL(s))
	}
	if u.User != nil {
		return fmt.Errorf("image URL %q: no user or password in it: the BMC shows the URL", redactURL(s))
	}
	return nil
}

// redactURL is s without its user, query and fragment, for logs and the
// timeline: a signed URL's token stays out of them.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unreadable URL)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment = nil, "", false, ""
	return u.String()
}

// scrub takes the query of imageURL out of err's text: a BMC's error
// may quote the URL it could not fetch.
func scrub(err error, imageURL string) error {
	u, perr := url.Parse(imageURL)
	if perr != nil || u.RawQuery == "" || !strings.Contains(err.Error(), u.RawQuery) {
		return err
	}
	return &scrubbed{msg: strings.ReplaceAll(err.Error(), u.RawQuery, "…"), err: err}
}

// scrubbed is an error whose text was scrubbed; it still wraps the
// original (a timeout stays one).
type scrubbed struct {
	msg string
	err error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.err }

// mediaTimeout is the Manager's bound on one virtual media call.
func (m *Manager) mediaTimeout() time.Duration {
	if m.MediaTimeout > 0 {
		return m.MediaTimeout
	}
	return DefaultMediaTimeout
}

// media is the node's BMC as a MediaController, or ErrNoMedia.
func media(t target, c Controller) (MediaController, error) {
	mc, ok := c.(MediaController)
	if !ok || t.node.BMC.Protocol != plan.BMCRedfish {
		return nil, ErrNoMedia
	}
	return mc, nil
}

// InsertMedia boots the node key ("site/node") from an image through its
// Redfish BMC: the image at imageURL into the virtual CD (what was there
// ejected), the next boot from the CD (once), then a power cycle, or a
// power-on of a node that is off. Each step is on the node's timeline;
// the first that fails ends it.
func (m *Manager) InsertMedia(ctx context.Context, key, imageURL string) (Status, error) {
	if err := checkImageURL(imageURL); err != nil {
		return Status{}, err
	}
	err := m.operator(ctx, key, func(t target, np *nodePower, c Controller) error {
		return m.bootMedia(ctx, t, np, c, imageURL)
	})
	if err != nil {
		return Status{}, err
	}
	st, _ := m.Status(key)
	return st, nil
}

// EjectMedia empties the virtual CD of the node key's Redfish BMC; an
// empty one is no error.
func (m *Manager) EjectMedia(ctx context.Context, key string) error {
	return m.operator(ctx, key, func(t target, _ *nodePower, c Controller) error {
		mc, err := media(t, c)
		if err != nil {
			return err
		}
		if err := m.boundedFor(ctx, m.mediaTimeout(), func(ctx context.Context) error { return mc.SetVirtualMedia(ctx, "") }); err != nil {
			m.Record(t.site.Name, t.node.Name, "power: virtual CD eject failed: "+err.Error(), true, 0)
			return err
		}
		m.Record(t.site.Name, t.node.Name, "power: virtual CD ejected (asked by "+askedBy(ctx)+")", false, 0)
		return nil
	})
}

// boundedFor runs one BMC call within d.
func (m *Manager) boundedFor(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

// bootMedia inserts imageURL into t's virtual CD, sets the next boot from
// it (once) and cycles the node (or powers it on); each step on its
// timeline, the first failure ends it. The caller holds np.call.
func (m *Manager) bootMedia(ctx context.Context, t target, np *nodePower, c Controller, imageURL string) error {
	mc, err := media(t, c)
	if err != nil {
		return err
	}
	image := redactURL(imageURL)
	// note puts a step on the timeline: done, or failed and why.
	note := func(done, failed string, err error) error {
		if err != nil {
			err = scrub(err, imageURL)
			m.Record(t.site.Name, t.node.Name, "power: "+failed+" failed: "+err.Error(), true, 0)
			return err
		}
		m.Record(t.site.Name, t.node.Name, "power: "+done+" (asked by "+askedBy(ctx)+")", false, 0)
		return nil
	}
	err = m.boundedFor(ctx, m.mediaTimeout(), func(ctx context.Context) error { return mc.SetVirtualMedia(ctx, imageURL) })
	if err := note("virtual CD "+image+" inserted", "inserting virtual CD "+image, err); err != nil {
		return err
	}
	m.mu.Lock()
	np.inserted = true
	m.mu.Unlock()
	err = m.again(ctx, func(ctx context.Context) error { return c.SetBootDevice(ctx, "cdrom", true) })
	if err := note("set next boot cdrom (once)", "set next boot cdrom (once)", err); err != nil {
		return err
	}
	var state string
	err = m.again(ctx, func(ctx context.Context) (err error) { state, err = c.PowerState(ctx); return err })
	action, said := "cycle", "cycled to boot the virtual CD"
	if err == nil && state == Off {
		action, said = "on", "powered on to boot the virtual CD (it was off)"
	}
	if err == nil {
		err = m.bounded(ctx, func(ctx context.Context) error { return c.SetPower(ctx, action) })
	}
	if err := note(said, "power "+action+" to boot the virtual CD", err); err != nil {
		return err
	}
	m.settle(ctx, c, np, action)
	return nil
}

// ejectDone empties the virtual CD the daemon filled for a node that is
// now provisioned at its generation and not installing: its medium must
// not boot again at its next power cycle. The caller holds np.call.
func (m *Manager) ejectDone(ctx context.Context, t target, np *nodePower) {
	m.mu.Lock()
	inserted := np.inserted
	m.mu.Unlock()
	if !inserted || t.node.BMC == nil {
		return
	}
	installing, installed, ok := m.Node(t.site.Name, t.node.Name)
	if installing || !ok || installed < t.node.Reprovision {
		return
	}
	c, err := m.controller(ctx, t)
	var mc MediaController
	if err == nil {
		mc, err = media(t, c)
	}
	if err == nil {
		err = m.boundedFor(ctx, m.mediaTimeout(), func(ctx context.Context) error { return mc.SetVirtualMedia(ctx, "") })
	}
	if err != nil {
		m.Record(t.site.Name, t.node.Name, "power: virtual CD eject failed (tried again at the next poll): "+err.Error(), true, 0)
		return
	}
	m.mu.Lock()
	np.inserted = false
	m.mu.Unlock()
	m.Record(t.site.Name, t.node.Name, fmt.Sprintf("power: virtual CD ejected: the node is provisioned at generation %d", installed), false, 0)
}
