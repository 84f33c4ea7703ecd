package rollout

import (
	"cmp"
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // A window's timezone must resolve on hosts without system tzdata.

	"github.com/bootops/bootops/plan"
)

// ErrPolicy is wrapped by every error about a rollout policy. The compiler
// validates policies, so one of these means the daemon was given a policy
// that did not come from it.
var ErrPolicy = errors.New("rollout: invalid policy")

// ParseMaxUnavailable is plan.Rollout.Max of a policy whose
// MaxUnavailable is s, its error an ErrPolicy.
func ParseMaxUnavailable(s string, groupSize int) (int, error) {
	v, err := plan.Rollout{MaxUnavailable: s}.Max(groupSize)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	return v, nil
}

// weekdays are the names a window's Days use.
var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// InWindow says whether now falls in w (a nil window is always open).
// Start is inclusive and End exclusive. An End at or before Start runs
// past midnight, and the day that must be listed in Days is the one the
// window opened on: a "sat" window from 22:00 to 02:00 is open at 01:00
// on Sunday. The clock is read in w.Timezone (UTC when empty).
func InWindow(now time.Time, w *plan.Window) (bool, error) {
	if w == nil {
		return true, nil
	}
	loc, err := time.LoadLocation(cmp.Or(w.Timezone, "UTC"))
	if err != nil {
		return false, fmt.Errorf("%w: window timezone %q: %v", ErrPolicy, w.Timezone, err)
	}
	start, err1 := clock(w.Start)
	end, err2 := clock(w.End)
	days, err3 := dayset(w.Days)
	if err := errors.Join(err1, err2, err3); err != nil {
		return false, err
	}
	t := now.In(loc)
	m := t.Hour()*60 + t.Minute()
	today, yesterday := days[t.Weekday()], days[(t.Weekday()+6)%7]
	if start < end {
		return today && start <= m && m < end, nil
	}
	// Past midnight: the evening part belongs to today's window, the
	// morning part to the one that opened yesterday.
	return (today && m >= start) || (yesterday && m < end), nil
}

// clock parses "HH:MM" into minutes after midnight.
func clock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf("%w: window time %q: want HH:MM", ErrPolicy, s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// dayset is which weekdays a window opens on; none listed means all.
func dayset(names []string) ([7]bool, error) {
	var set [7]bool
	if len(names) == 0 {
		return [7]bool{true, true, true, true, true, true, true}, nil
	}
	for _, n := range names {
		d, ok := weekdays[n]
		if !ok {
			return set, fmt.Errorf("%w: window day %q: want one of mon, tue, wed, thu, fri, sat, sun", ErrPolicy, n)
		}
		set[d] = true
	}
	return set, nil
}

// policy is a plan.Rollout checked and parsed once per Step.
type policy struct {
	plan.Rollout
	max         int           // nodes that may be down at once
	timeout     time.Duration // how long a started node has to be healthy
	timeoutText string        // the timeout as the policy wrote it, for messages
	open        bool          // the window is open now
}

// compile checks every field of pol at once, so a bad policy is reported
// whole and Step touches nothing. An empty Strategy is manual (the one
// that never reinstalls anything); empty MaxUnavailable and HealthTimeout
// take plan's defaults.
func compile(now time.Time, pol plan.Rollout, size int) (policy, error) {
	p := policy{Rollout: pol}
	var errs []error
	switch pol.Strategy {
	case "":
		p.Strategy = plan.RolloutManual
	case plan.RolloutManual, plan.RolloutRolling:
	default:
		errs = append(errs, fmt.Errorf("%w: strategy %q: want manual or rolling", ErrPolicy, pol.Strategy))
	}
	var err error
	if p.max, err = ParseMaxUnavailable(cmp.Or(pol.MaxUnavailable, plan.DefaultMaxUnavailable), size); err != nil {
		errs = append(errs, err)
	}
	p.timeoutText = cmp.Or(pol.HealthTimeout, plan.DefaultHealthTimeout)
	if p.timeout, err = time.ParseDuration(p.timeoutText); err != nil || p.timeout <= 0 {
		errs = append(errs, fmt.Errorf("%w: healthTimeout %q: want a positive Go duration (\"30m\")", ErrPolicy, p.timeoutText))
	}
	if pol.Canary < 0 {
		errs = append(errs, fmt.Errorf("%w: canary %d: must not be negative", ErrPolicy, pol.Canary))
	}
	if p.open, err = InWindow(now, pol.Window); err != nil {
		errs = append(errs, err)
	}
	return p, errors.Join(errs...)
}
