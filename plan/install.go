package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// Install is what installing a node consumes, by digest: the image it
// writes, its workflow (partitioning, files, commands, every parameter)
// and its cloud-init (user-data and network-config). Digest covers the
// three. The compiler computes it for each node's current revision; the
// boot plane keeps the one a machine was installed with, so a node whose
// Git has moved on shows as out of date. The node's reprovision
// generation is not part of it: raising reprovision is not a change of
// what is installed.
type Install struct {
	Digest    string `json:"digest"`
	Image     string `json:"image,omitempty"`
	Workflow  string `json:"workflow"`
	CloudInit string `json:"cloudInit"`
}

// InstallOf is the install n's artifacts describe.
func InstallOf(n *Node) Install {
	var images []string
	wf := n.Artifacts.Workflow
	wf.Actions = append([]Action(nil), wf.Actions...)
	for i, a := range wf.Actions {
		if a.Action == "image-to-disk" {
			images = append(images, a.SHA256)
			// The image is its own part: the workflow's digest says
			// what else changed.
			wf.Actions[i].URL, wf.Actions[i].SHA256, wf.Actions[i].Compression = "", "", ""
		}
	}
	in := Install{
		Image:     strings.Join(images, ","),
		Workflow:  Hash(wf),
		CloudInit: Hash([2]string{n.Artifacts.UserData, n.Artifacts.NetworkConfig}),
	}
	in.Digest = Hash([3]string{in.Image, in.Workflow, in.CloudInit})
	return in
}

// Changes says what differs from i to want: "image 1a2b3c4d…→5e6f7a8b…",
// "workflow", "cloud-init"; none when the digests agree. An Install known
// only by its digest (the installed OS's report) differs as "install".
func (i Install) Changes(want Install) []string {
	if i.Digest == want.Digest {
		return nil
	}
	if i.Workflow == "" && i.CloudInit == "" {
		return []string{"install " + Short(i.Digest) + "→" + Short(want.Digest)}
	}
	var out []string
	if i.Image != want.Image {
		out = append(out, "image "+Short(i.Image)+"→"+Short(want.Image))
	}
	if i.Workflow != want.Workflow {
		out = append(out, "workflow")
	}
	if i.CloudInit != want.CloudInit {
		out = append(out, "cloud-init")
	}
	if len(out) == 0 {
		out = append(out, "install "+Short(i.Digest)+"→"+Short(want.Digest))
	}
	return out
}

// Short is a digest's first 8 hex digits and an ellipsis ("-" for none).
func Short(d string) string {
	switch {
	case d == "":
		return "-"
	case len(d) > 8:
		return d[:8] + "…"
	}
	return d
}

// Rollout strategies.
const (
	RolloutManual  = "manual"
	RolloutRolling = "rolling"
)

// Rollout is how out-of-date nodes of one profile at one site are
// reinstalled: a Profile's rollout over its Site's, field by field, with
// the defaults filled in. Under manual, drift is only shown.
type Rollout struct {
	Strategy string `json:"strategy"`
	// MaxUnavailable is a count ("1") or a share of the group's nodes
	// ("10%", rounded down, at least 1).
	MaxUnavailable string `json:"maxUnavailable"`
	// Canary nodes (the first ones in order) go first; the others wait
	// until every canary is healthy.
	Canary int `json:"canary,omitempty"`
	// Order sorts the nodes by these labels, then by name.
	Order []string `json:"order,omitempty"`
	// HealthTimeout is how long a reinstalled node has to report running
	// with the new install (a Go duration).
	HealthTimeout string `json:"healthTimeout"`
	// CloudInit: a node is healthy only when its report also says
	// cloud-init finished without errors.
	CloudInit bool `json:"cloudInit,omitempty"`
	// Window, when set, is when nodes may be started.
	Window *Window `json:"window,omitempty"`
	Pause  bool    `json:"pause,omitempty"`
}

// Max is how many nodes of a group of groupSize the policy lets be down
// at once: MaxUnavailable a count ("2") or a share of the group ("10%",
// rounded down, at least 1). Zero, a negative number or anything else is
// an error: a rollout that may take no node down would never progress.
func (r Rollout) Max(groupSize int) (int, error) {
	s := r.MaxUnavailable
	num, pct := strings.CutSuffix(s, "%")
	v, err := strconv.Atoi(num)
	switch {
	case err != nil || num == "" || strings.Trim(num, "0123456789") != "":
		return 0, fmt.Errorf("maxUnavailable %q: want a count (\"1\") or a percentage (\"10%%\")", s)
	case v < 1:
		return 0, fmt.Errorf("maxUnavailable %q: must be at least 1", s)
	case pct && v > 100:
		return 0, fmt.Errorf("maxUnavailable %q: a percentage is at most 100%%", s)
	case !pct:
		return v, nil
	}
	return max(v*groupSize/100, 1), nil
}

// Window is a weekly maintenance window: on Days (mon…sun; none: every
// day), from Start to End ("02:00", "06:00"; an End before Start runs
// past midnight), in Timezone (an IANA name; default UTC).
type Window struct {
	Days     []string `json:"days,omitempty"`
	Start    string   `json:"start"`
	End      string   `json:"end"`
	Timezone string   `json:"timezone,omitempty"`
}

// Rollout defaults.
const (
	DefaultMaxUnavailable = "1"
	DefaultHealthTimeout  = "30m"
)
