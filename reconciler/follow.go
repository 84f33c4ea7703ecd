package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Follower keeps a Reconciler on a Git ref: it polls (with jitter), and
// a webhook's Trigger makes it look at once. Two triggers while a look is
// under way make one more look, so a burst of pushes ends at the last.
type Follower struct {
	Git *Git
	R   *Reconciler
	Log *slog.Logger
	// Timeout bounds one look (list, fetch, compile); default 2 minutes.
	Timeout time.Duration

	mu       sync.Mutex
	interval time.Duration
	keyring  string
	trigger  chan string
	ref      plumbing.ReferenceName // the ref as the remote named it last
	seen     plumbing.Hash          // the last commit compiled (served or refused)
	files    Files                  // the tree the compiler saw last (zero: none yet)
	asked    time.Time              // when the pending trigger came (zero: none)
}

// Configure sets the poll interval (0: 30 s) and the armored OpenPGP
// keyring commits must be signed with ("": signatures are not checked).
// It may be called again while running (SIGHUP).
func (f *Follower) Configure(interval time.Duration, keyring string) {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	f.mu.Lock()
	changed := f.keyring != keyring
	f.interval, f.keyring = interval, keyring
	if changed {
		// The same commit may now be judged otherwise.
		f.seen = plumbing.ZeroHash
	}
	running := f.trigger != nil
	f.mu.Unlock()
	if running {
		f.Trigger("configuration") // and wait the new interval from now
	}
}

// Restored tells the follower which commit the kept Plan came from: when
// the remote is still there, nothing is fetched.
func (f *Follower) Restored(revision string) {
	if shaRE.MatchString(revision) {
		f.mu.Lock()
		f.seen = plumbing.NewHash(revision)
		f.mu.Unlock()
	}
}

func (f *Follower) ch() chan string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trigger == nil {
		f.trigger = make(chan string, 1)
	}
	return f.trigger
}

// Ref is the full name of the ref followed ("refs/heads/main"), once the
// remote was listed; "" before, or for a pinned commit.
func (f *Follower) Ref() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.ref)
}

// Trigger asks for a look now; it never blocks.
func (f *Follower) Trigger(reason string) {
	select {
	case f.ch() <- reason:
		f.mu.Lock()
		if f.asked.IsZero() {
			f.asked = time.Now()
		}
		f.mu.Unlock()
	default: // one is already pending: it will see this push too
	}
}

// Run follows the ref until ctx ends.
func (f *Follower) Run(ctx context.Context) error {
	f.Git.CleanWorkDir()
	trigger := f.ch()
	reason := "start"
	var backoff time.Duration
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		err := f.Sync(ctx, reason)
		if ctx.Err() != nil {
			return nil
		}
		f.mu.Lock()
		wait := f.interval
		f.mu.Unlock()
		wait = time.Duration(float64(wait) * (0.9 + 0.2*rand.Float64()))
		if err != nil {
			// 750 ms, 1.5 s, 3 s … up to the poll interval.
			backoff = min(max(2*backoff, 750*time.Millisecond), wait)
			wait = backoff
		} else {
			backoff = 0
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case reason = <-trigger:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
			reason = "poll"
		}
	}
}

// Sync looks at the remote once: when the ref moved, it fetches the
// commit and hands it to the Reconciler. A webhook's push is fetched
// straight into the clone kept from the last fetch of the ref (one
// connection to the remote: the fetch's own listing says where the ref
// is); a poll, a first look, or a kept clone that cannot fetch lists the
// remote first (which also follows a remote HEAD moved to another branch).
func (f *Follower) Sync(ctx context.Context, reason string) error {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var stages Stages
	f.mu.Lock()
	if !f.asked.IsZero() {
		stages.QueuedMS, f.asked = ms(start.Sub(f.asked)), time.Time{}
	}
	known := f.ref
	f.mu.Unlock()
	if strings.HasPrefix(reason, HookReason) && known != "" {
		co, ok, err := f.Git.FetchKept(ctx, known)
		if ok && err == nil {
			stages.FetchMS = ms(time.Since(start))
			return f.apply(co, reason, start, &stages)
		}
		if ok {
			f.log().Debug("source: the kept clone did not fetch; listing the remote", "reason", reason, "err", err)
		}
	}
	ref, h, err := f.Git.Head(ctx)
	listed := time.Now()
	stages.ListMS = ms(listed.Sub(start))
	if err != nil {
		f.R.Checked("", err)
		f.log().Warn("source: cannot list the remote", "reason", reason, "err", err)
		return err
	}
	f.mu.Lock()
	seen := f.seen
	f.ref = ref
	f.mu.Unlock()
	if h == seen {
		f.R.Checked(h.String(), nil)
		f.log().Debug("source: unchanged", "reason", reason, "revision", h.String())
		return nil
	}
	co, err := f.Git.Fetch(ctx, ref, h)
	if err != nil {
		f.R.Checked(h.String(), err)
		f.log().Warn("source: cannot fetch", "reason", reason, "revision", h.String(), "err", err)
		return err
	}
	stages.FetchMS = ms(time.Since(listed))
	return f.apply(co, reason, start, &stages)
}

// apply hands the fetched commit to the Reconciler (unless it is the one
// compiled last) and closes the checkout.
func (f *Follower) apply(co *Checkout, reason string, start time.Time, stages *Stages) error {
	defer co.Close()
	fetched := time.Since(start)
	f.mu.Lock()
	seen, keyring := f.seen, f.keyring
	f.mu.Unlock()
	rev := co.Commit.Hash.String()
	if co.Commit.Hash == seen {
		f.R.Checked(rev, nil)
		f.log().Debug("source: unchanged", "reason", reason, "revision", rev)
		return nil
	}
	f.R.Checked(rev, nil)
	snap := Snapshot{Revision: rev, Message: subject(co.Commit.Message), FS: co.FS, Materialize: true, Stages: stages}
	if keyring != "" {
		snap.Refused = verifyCommit(co.Commit, keyring)
	}
	read := time.Now()
	f.mu.Lock()
	snap.Changed = co.FS.Changed(f.files)
	f.mu.Unlock()
	stages.ReadMS = ms(time.Since(read))
	_, err := f.R.Apply(snap)
	f.mu.Lock()
	if snap.Refused == nil {
		f.files = co.FS.Files // what the compiler saw, compiled or not
	}
	f.seen = co.Commit.Hash
	f.mu.Unlock()
	f.log().Info("source: synced", "reason", reason, "revision", rev, "fetch_ms", fetched.Milliseconds(), "total_ms", time.Since(start).Milliseconds(), "ok", err == nil)
	return nil // a refused revision is the repository's problem, not the source's
}

// CheckKeyring reads an armored OpenPGP keyring, to report a bad one at
// start rather than at the first commit.
func CheckKeyring(armored string) error {
	keys, err := openpgp.ReadArmoredKeyRing(strings.NewReader(armored))
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return errors.New("no public key in the keyring")
	}
	return nil
}

// verifyCommit checks the commit's OpenPGP signature against the keyring.
func verifyCommit(c *object.Commit, keyring string) error {
	sig := strings.TrimSpace(c.PGPSignature)
	switch {
	case sig == "":
		return fmt.Errorf("commit %s is not signed (--verify-commits requires a signature by a key of the keyring)", short(c.Hash.String()))
	case strings.HasPrefix(sig, "-----BEGIN SSH SIGNATURE-----"):
		return fmt.Errorf("commit %s has an SSH signature: only OpenPGP signatures can be verified (--verify-commits)", short(c.Hash.String()))
	}
	e, err := c.Verify(keyring)
	if err != nil {
		return fmt.Errorf("commit %s: signature not verified by the keyring: %v", short(c.Hash.String()), err)
	}
	if e == nil {
		return errors.New("signature: no signer")
	}
	return nil
}

func subject(msg string) string {
	s := firstLine(strings.TrimSpace(msg))
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

func (f *Follower) log() *slog.Logger {
	if f.Log != nil {
		return f.Log
	}
	return slog.New(slog.DiscardHandler)
}
