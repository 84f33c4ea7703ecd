package sitecluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A role is a service one member of the site performs at a time — DHCP on
// a site's interface, where two answers to one packet would confuse a
// machine. Its holder is a key of the roles bucket, whose values live
// RoleTTL after their last write: the holder writes it again every
// RoleTTL/6 (a compare-and-set on the revision it wrote last), the others
// try to create it as often and win once it has expired or been given
// back. A holder counts itself active only until RoleTTL/2 after the
// start of its last successful write, so it stops before any other member
// can have taken the role (RoleTTL after that write): never two at once,
// one within about RoleTTL of a holder's death, at once when it gives the
// role back (a daemon stopping).
const (
	BucketRoles = "bootops-roles"
	RoleTTL     = 3 * time.Second
)

// Role is this member's campaign for one role.
type Role struct {
	m       *Member
	name    string
	changed func(active bool)

	// until is when this member stops counting itself the holder, as a
	// time since base (monotonic): Active reads it without a lock, once
	// per DHCP packet.
	base  time.Time
	until atomic.Int64

	mu   sync.Mutex
	rev  uint64 // the revision this member wrote last (0: not the holder)
	was  bool
	done chan struct{}
}

// Campaign runs this member's campaign for role name until ctx ends (it
// then gives the role back). changed, when set, is told each time this
// member starts or stops holding it.
func (m *Member) Campaign(ctx context.Context, name string, changed func(active bool)) *Role {
	r := &Role{m: m, name: name, changed: changed, base: time.Now(), done: make(chan struct{})}
	go r.run(ctx)
	return r
}

// Active says whether this member holds the role now.
func (r *Role) Active() bool { return time.Since(r.base) < time.Duration(r.until.Load()) }

// Done is closed once the campaign has ended and the role is given back.
func (r *Role) Done() <-chan struct{} { return r.done }

func (r *Role) run(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(RoleTTL / 6)
	defer t.Stop()
	for {
		r.try(ctx)
		select {
		case <-ctx.Done():
			r.release()
			return
		case <-t.C:
		}
	}
}

// try writes the role once: renews it when held, else tries to take it.
func (r *Role) try(ctx context.Context) {
	start := time.Since(r.base)
	ctx, cancel := context.WithTimeout(ctx, RoleTTL/3)
	defer cancel()
	r.mu.Lock()
	rev := r.rev
	r.mu.Unlock()
	var err error
	if rev != 0 {
		rev, err = r.m.roles.Update(ctx, r.name, []byte(r.m.cfg.Name), rev)
	} else {
		rev, err = r.m.roles.Create(ctx, r.name, []byte(r.m.cfg.Name))
	}
	r.mu.Lock()
	if err == nil {
		r.rev = rev
		r.until.Store(int64(start + RoleTTL/2))
	} else if !errors.Is(err, context.DeadlineExceeded) || !r.Active() {
		r.rev = 0 // another holds it, or this member cannot renew in time
	}
	active := r.Active()
	flip := active != r.was
	r.was = active
	r.mu.Unlock()
	if flip && r.changed != nil {
		r.changed(active)
	}
}

// release gives the role back (its key deleted at the revision this member
// wrote), so another member takes it at its next try.
func (r *Role) release() {
	r.mu.Lock()
	rev, was := r.rev, r.was
	r.rev, r.was = 0, false
	r.until.Store(0)
	r.mu.Unlock()
	if rev != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), RoleTTL/3)
		r.m.roles.Delete(ctx, r.name, jetstream.LastRevision(rev))
		cancel()
	}
	if was && r.changed != nil {
		r.changed(false)
	}
}

// Holder is the member holding role name, as the bucket's leader has it
// ("" when none).
func (m *Member) Holder(name string) string {
	// A second at most: a status page waits for no election.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := m.leaderGet(ctx, BucketRoles, name)
	if err != nil {
		return ""
	}
	return string(b)
}
