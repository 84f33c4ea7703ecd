package compiler

import (
	"slices"
	"time"
	_ "time/tzdata" // a window's timezone must not depend on the machine's tzdata

	"github.com/bootops/bootops/plan"
)

// rollouts are site s's rollout policies by profile: each profile's
// rollout over the site's, field by field, defaults filled in; only the
// profiles whose policy is not the default, so sites without one keep
// their hash.
func (r *repo) rollouts(site *object) map[string]*plan.Rollout {
	def := plan.Rollout{Strategy: plan.RolloutManual, MaxUnavailable: plan.DefaultMaxUnavailable, HealthTimeout: plan.DefaultHealthTimeout}
	var out map[string]*plan.Rollout
	for _, name := range sortedKeys(r.profiles) {
		ro := def
		merged := false
		for _, v := range []*value{site.v.get("rollout"), r.profiles[name].v.get("rollout")} {
			if v != nil {
				applyRollout(&ro, v)
				merged = true
			}
		}
		if !merged || ro.Strategy == plan.RolloutManual && equalRollout(ro, def) {
			continue
		}
		if out == nil {
			out = map[string]*plan.Rollout{}
		}
		out[name] = &ro
	}
	return out
}

// applyRollout sets the fields v has.
func applyRollout(ro *plan.Rollout, v *value) {
	if s := v.get("strategy"); s != nil {
		ro.Strategy = s.String()
	}
	if m := v.get("maxUnavailable"); m != nil {
		ro.MaxUnavailable = m.String()
	}
	if c := v.get("canary"); c != nil {
		ro.Canary = c.integer()
	}
	if o := v.get("order"); o != nil {
		ro.Order = o.strs()
	}
	if h := v.get("healthTimeout"); h != nil {
		ro.HealthTimeout = h.String()
	}
	if c := v.get("cloudInit"); c != nil && c.kind == kBool {
		ro.CloudInit = c.b
	}
	if p := v.get("pause"); p != nil && p.kind == kBool {
		ro.Pause = p.b
	}
	if w := v.get("window"); w != nil {
		ro.Window = &plan.Window{Days: w.get("days").strs(), Start: w.get("start").String(), End: w.get("end").String(), Timezone: w.get("timezone").String()}
	}
}

func equalRollout(a, b plan.Rollout) bool {
	return a.Strategy == b.Strategy && a.MaxUnavailable == b.MaxUnavailable && a.Canary == b.Canary && slices.Equal(a.Order, b.Order) &&
		a.HealthTimeout == b.HealthTimeout && a.CloudInit == b.CloudInit && a.Window == nil && b.Window == nil && a.Pause == b.Pause
}

// checkRollouts: what the schema cannot say about a rollout (a time zone
// that exists, a health timeout long enough for an install).
func (r *repo) checkRollouts() {
	var objs []*object
	for _, name := range sortedKeys(r.sites) {
		objs = append(objs, r.sites[name])
	}
	for _, name := range sortedKeys(r.profiles) {
		objs = append(objs, r.profiles[name])
	}
	for _, o := range objs {
		v := o.v.get("rollout")
		if v == nil {
			continue
		}
		if tz := v.lookup("window", "timezone").String(); tz != "" {
			if _, err := time.LoadLocation(tz); err != nil {
				r.errorf(o.pos("rollout", "window", "timezone"), "rollout.window.timezone", "%q is not a time zone (an IANA name such as Europe/Berlin, or UTC)", tz)
			}
		}
		if h := v.get("healthTimeout").String(); h != "" {
			if d, err := time.ParseDuration(h); err == nil && d < time.Minute {
				r.errorf(o.pos("rollout", "healthTimeout"), "rollout.healthTimeout", "%s: at least 1m (a machine reboots, installs and reboots again in it)", h)
			}
		}
		if w := v.get("window"); w != nil && w.get("start").String() == w.get("end").String() && w.get("start") != nil {
			r.errorf(o.pos("rollout", "window"), "rollout.window", "start and end are both %s: an empty window starts nothing", w.get("start").String())
		}
	}
}
