package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/bootops/bootops/boot/status"
)

// Outbox is a site's store-and-forward buffer: status.Durable opened with
// Options.Outbox.
type Outbox interface {
	Pending(after uint64, max int) ([]status.Outgoing, error)
	Sent(upTo uint64) error
}

// Forwarder sends a site daemon's events to the hub, in store order, each
// once: an event leaves the outbox only when the hub's stream has
// acknowledged it, and a resend after a cut link carries the same
// store epoch and sequence, which the hub drops. While the hub is
// unreachable the site goes on: its events wait in its status store.
type Forwarder struct {
	Site string
	// URLs are the hub's servers (any of them will do).
	URLs []string
	// Seed is the site's nkey seed (bootops hub add-site wrote it).
	Seed []byte
	// RootCAs verify the hub's TLS certificate; nil: plain (tests only).
	RootCAs *x509.CertPool
	Outbox  Outbox
	// EpochFile is where the forwarder keeps its status store's identity
	// (an epoch, made at random the first time) beside the store: a store
	// wiped and made anew numbers its events from 1 again, and the
	// forwarder then takes a new epoch, so the hub does not drop them as
	// resends. "": no epoch (the hub keeps one sequence for the site).
	EpochFile string
	// Hello is what the site says of itself every HelloEvery (default
	// 10 s) while connected.
	Hello      func() Hello
	HelloEvery time.Duration
	// Batch is how many events are in flight at once (default 512).
	Batch int
	Log   *slog.Logger

	// Wake, when sent to, makes it look at the outbox now (the store's
	// Changed hook); else it looks every 200 ms.
	wake      chan struct{}
	wakeOnce  sync.Once
	connected atomic.Bool
	sent      atomic.Uint64
	mu        sync.Mutex
	lastErr   string
	epoch     storeEpoch // Run's; Epoch reads it under mu
}

// Poke says the outbox has news.
func (f *Forwarder) Poke() {
	select {
	case f.wakeup() <- struct{}{}:
	default:
	}
}

// wakeup is the channel Poke sends on: made once, by whichever of Poke
// and Run comes first (the store may call Poke before Run starts).
func (f *Forwarder) wakeup() chan struct{} {
	f.wakeOnce.Do(func() { f.wake = make(chan struct{}, 1) })
	return f.wake
}

// Connected says whether the link to the hub is up.
func (f *Forwarder) Connected() bool { return f.connected.Load() }

// Sent counts the events the hub acknowledged.
func (f *Forwarder) Sent() uint64 { return f.sent.Load() }

// Epoch is the status store's epoch the forwarder sends under ("": none,
// or Run has not read EpochFile yet).
func (f *Forwarder) Epoch() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch.Epoch
}

// Run forwards until ctx ends. It dials the hub for as long as it runs:
// when nats.go gives up on a link (it does after the hub refused the
// site's key twice: a key removed, and later put back), Run dials again,
// waiting longer each time up to a minute, and says so.
func (f *Forwarder) Run(ctx context.Context) error {
	f.wakeup()
	if f.Log == nil {
		f.Log = slog.New(slog.DiscardHandler)
	}
	if f.Batch <= 0 {
		f.Batch = 512
	}
	if f.HelloEvery <= 0 {
		f.HelloEvery = 10 * time.Second
	}
	kp, err := nkeys.FromSeed(f.Seed)
	if err != nil {
		return fmt.Errorf("hub: the site's nkey seed: %w", err)
	}
	if f.EpochFile != "" {
		e, made, err := loadEpoch(f.EpochFile)
		if err != nil {
			return err
		}
		if made {
			f.Log.Info("hub: a new epoch for the status store", "epoch", e.Epoch, "file", f.EpochFile)
		}
		f.setEpoch(e)
	}
	opts := f.natsOptions(kp)
	backoff := time.Second
	for ctx.Err() == nil {
		nc, err := nats.Connect(strings.Join(f.URLs, ","), opts...)
		if err == nil {
			f.setState(nc.IsConnected(), "")
			start := time.Now()
			f.session(ctx, nc)
			if err = nc.LastError(); err == nil {
				err = errors.New("the connection closed")
			}
			nc.Close()
			if time.Since(start) > time.Minute {
				backoff = time.Second
			}
		}
		f.setState(false, errString(err))
		if ctx.Err() != nil {
			break
		}
		f.Log.Warn("hub: the link gave up (is the site's key still registered at the hub?); dialing again", "in", backoff.String(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
	return nil
}

// natsOptions are the link's options: the site's key kp, its inbox,
// reconnecting for ever without a buffer, and the link's state kept and
// logged as it changes.
func (f *Forwarder) natsOptions(kp nkeys.KeyPair) []nats.Option {
	pub, _ := kp.PublicKey()
	opts := []nats.Option{
		nats.Name("bootops-site-" + f.Site),
		nats.Nkey(pub, kp.Sign),
		// The hub answers the site in its own inbox, the one subject tree
		// its key may subscribe to.
		nats.CustomInboxPrefix(Inbox(f.Site)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// No buffering while disconnected: the outbox is the buffer, and a
		// publish that cannot go fails at once.
		nats.ReconnectBufSize(-1),
		nats.RetryOnFailedConnect(true),
		// The hub's servers as the site was told them: the addresses they
		// advertise to each other may not be reachable from a site.
		nats.IgnoreDiscoveredServers(),
		nats.ConnectHandler(func(nc *nats.Conn) {
			f.setState(true, "")
			f.Log.Info("hub: link up", "server", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			f.setState(false, errString(err))
			f.Log.Warn("hub: link down; events wait in the status store", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			f.setState(true, "")
			f.Log.Info("hub: link up again", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			f.setState(f.connected.Load(), errString(err))
			f.Log.Warn("hub: refused", "err", err)
		}),
	}
	if f.RootCAs != nil {
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: f.RootCAs, MinVersion: tls.VersionTLS12}))
	}
	return opts
}

// session forwards over nc until ctx ends or nc is closed for good.
func (f *Forwarder) session(ctx context.Context, nc *nats.Conn) {
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	subject := SubjectPrefix + f.Site
	var cursor uint64
	lastHello, lastAsked := time.Time{}, time.Time{}
	wait := 200 * time.Millisecond
	for ctx.Err() == nil && !nc.IsClosed() {
		if nc.IsConnected() && time.Since(lastAsked) >= f.HelloEvery {
			if renewed, err := f.checkRestored(nc, subject); err == nil {
				lastAsked = time.Now()
				if renewed {
					cursor = 0 // what waits goes again, under the new epoch, from the start of a sequence
				}
			}
		}
		if nc.IsConnected() && f.Hello != nil && time.Since(lastHello) >= f.HelloEvery {
			if err := f.hello(ctx, js, subject); err == nil {
				lastHello = time.Now()
			}
		}
		n, err := f.flush(ctx, js, subject, &cursor)
		switch {
		case err != nil:
			if nc.IsConnected() {
				f.Log.Warn("hub: events not acknowledged; they stay in the outbox", "err", err)
			}
			wait = min(wait*2, 5*time.Second)
		case n == f.Batch:
			continue // more waiting
		default:
			wait = 200 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-f.wake:
		case <-time.After(wait):
		}
	}
}

func (f *Forwarder) setEpoch(e storeEpoch) {
	f.mu.Lock()
	f.epoch = e
	f.mu.Unlock()
}

// checkEpoch takes a new epoch when the outbox's oldest event, first, is
// at or below what the hub acknowledged: the store was wiped and made
// anew, and numbers its events from 1 again.
func (f *Forwarder) checkEpoch(first uint64) error {
	if f.EpochFile == "" || first > f.epoch.Sent {
		return nil
	}
	e := storeEpoch{Epoch: newEpoch()}
	if err := saveEpoch(f.EpochFile, e, true); err != nil {
		return err
	}
	f.Log.Warn("hub: the status store numbers its events from the start again (wiped?): a new epoch, the hub starts a new sequence for it",
		"epoch", e.Epoch, "previous_epoch", f.epoch.Epoch, "seq", first, "acknowledged_before", f.epoch.Sent)
	f.setEpoch(e)
	return nil
}

// checkRestored asks the hub how far it has applied the store's epoch
// (KindMark) and takes a new epoch when that is past any sequence the store
// ever issued: the store was restored from a backup, and issues again
// numbers the hub has had since — under the old epoch the hub would drop
// its new events as resends. A hub that does not know the question (an
// older one) answers with an error: nothing is learned.
func (f *Forwarder) checkRestored(nc *nats.Conn, subject string) (bool, error) {
	iss, ok := f.Outbox.(interface{ Issued() (uint64, error) })
	if f.EpochFile == "" || !ok {
		return false, nil
	}
	q := nats.NewMsg(subject)
	q.Header.Set(Kind, KindMark)
	q.Header.Set(Epoch, f.epoch.Epoch)
	reply, err := nc.RequestMsg(q, 5*time.Second)
	if err != nil {
		return false, err
	}
	var a MarkAnswer
	if json.Unmarshal(reply.Data, &a) != nil || a.Mark == 0 {
		return false, nil
	}
	issued, err := iss.Issued()
	if err != nil || a.Mark <= issued {
		return false, err
	}
	e := storeEpoch{Epoch: newEpoch()}
	if err := saveEpoch(f.EpochFile, e, true); err != nil {
		return false, err
	}
	f.Log.Warn("hub: the hub has this status store's events numbered past any the store issued (restored from a backup?): a new epoch, the hub starts a new sequence for it",
		"epoch", e.Epoch, "previous_epoch", f.epoch.Epoch, "hub_mark", a.Mark, "issued", issued)
	f.setEpoch(e)
	return true, nil
}

// acknowledged records that the hub has the store's events up to upTo
// (after the outbox dropped them). Not synced: an older Sent read after a
// crash only makes checkEpoch see a wiped store later.
func (f *Forwarder) acknowledged(upTo uint64) {
	if f.EpochFile == "" || upTo <= f.epoch.Sent {
		return
	}
	e := f.epoch
	e.Sent = upTo
	if err := saveEpoch(f.EpochFile, e, false); err != nil {
		f.Log.Warn("hub: the status store's epoch not written", "file", f.EpochFile, "err", err)
		return
	}
	f.setEpoch(e)
}

func (f *Forwarder) setState(connected bool, err string) {
	f.connected.Store(connected)
	f.mu.Lock()
	if err != "" || connected {
		f.lastErr = err
	}
	f.mu.Unlock()
}

// LastError is why the link is down (or was last refused); "" when up.
func (f *Forwarder) LastError() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastErr
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (f *Forwarder) hello(ctx context.Context, js jetstream.JetStream, subject string) error {
	h := f.Hello()
	h.Site, h.Sent, h.Epoch = f.Site, time.Now().UTC(), f.epoch.Epoch
	if c, ok := f.Outbox.(interface{ Unsent() (int, error) }); ok {
		if n, err := c.Unsent(); err == nil {
			h.Pending = n
		}
	}
	b, _ := json.Marshal(h)
	msg := nats.NewMsg(subject)
	msg.Header.Set(Kind, KindHello)
	if h.Epoch != "" {
		msg.Header.Set(Epoch, h.Epoch)
	}
	msg.Data = b
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := js.PublishMsg(cctx, msg)
	return err
}

// flush sends up to Batch events after *cursor and, when the stream
// acknowledged a prefix of them, drops that prefix from the outbox.
func (f *Forwarder) flush(ctx context.Context, js jetstream.JetStream, subject string, cursor *uint64) (int, error) {
	out, err := f.Outbox.Pending(*cursor, f.Batch)
	if err != nil || len(out) == 0 {
		return 0, err
	}
	if err := f.checkEpoch(out[0].Seq); err != nil {
		return 0, err
	}
	epoch := f.epoch.Epoch
	futures := make([]jetstream.PubAckFuture, 0, len(out))
	var sendErr error
	prev := *cursor
	for _, o := range out {
		msg := nats.NewMsg(subject)
		msg.Header.Set(Kind, KindEvent)
		if epoch != "" {
			msg.Header.Set(Epoch, epoch)
		}
		msg.Header.Set(jetstream.MsgIDHeader, msgID(f.Site, epoch, o.Seq))
		msg.Header.Set(Seq, strconv.FormatUint(o.Seq, 10))
		msg.Header.Set(Prev, strconv.FormatUint(prev, 10))
		prev = o.Seq
		msg.Data = o.JSON
		fut, err := js.PublishMsgAsync(msg)
		if err != nil {
			sendErr = err
			break
		}
		futures = append(futures, fut)
	}
	acked := 0
	timeout := time.After(10 * time.Second)
wait:
	for _, fut := range futures {
		select {
		case <-fut.Ok():
			acked++
		case err := <-fut.Err():
			sendErr = err
			break wait
		case <-timeout:
			sendErr = errors.New("no acknowledgement within 10 s")
			break wait
		case <-ctx.Done():
			sendErr = ctx.Err()
			break wait
		}
	}
	if acked > 0 {
		upTo := out[acked-1].Seq
		if err := f.Outbox.Sent(upTo); err != nil {
			return acked, err
		}
		*cursor = upTo
		f.sent.Add(uint64(acked))
		f.acknowledged(upTo)
	}
	if sendErr != nil {
		return acked, sendErr
	}
	return len(out), nil
}
