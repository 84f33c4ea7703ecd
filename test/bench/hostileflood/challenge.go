package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-tpm-tools/simulator"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/flood"
	"github.com/bootops/bootops/tpm"
)

// ChallengeSummary counts the check-ins' answers by kind and status:
// token (a boot token from the node's script, fetched from the attacker's
// address), forged (a boot token of the right shape the server never
// minted), none (no credential); and the attacker's script requests.
type ChallengeSummary struct {
	CheckIns   map[string]map[int]int `json:"checkIns"`
	Scripts    map[int]int            `json:"scripts"`
	Challenged int                    `json:"challenged"` // check-ins answered with a challenge
	ProbeSummary
	Elapsed string `json:"elapsed"`
}

var tokenRe = regexp.MustCompile(`bootops\.token=([A-Za-z0-9.]+)`)

// challenge asks for -count TPM challenges for one registered node from
// the attacker's few addresses (two thirds with the boot tokens of its
// script, a sixth forged, a sixth with none), while the probe, from
// addresses of its own taken in turn, asks as the machine would: its
// script, then its check-in with its TPM, answered with a challenge.
func challenge(args []string) (any, error) {
	o := httpFlags("challenge")
	site := o.flags.String("site", "lab", "the node's site")
	node := o.flags.String("node", "", "the node (registered, not provisioned)")
	serial := o.flags.String("serial", "", "its serial")
	count := o.flags.Int("count", 7200, "check-ins to send (at most 20000)")
	if err := o.parse(args); err != nil {
		return nil, err
	}
	if *node == "" || *serial == "" || *count > 20000 {
		return nil, fmt.Errorf("want -node, -serial and -count of at most 20000")
	}
	id, err := tpmIdentity()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.deadline)
	defer cancel()
	in := plan.CheckIn{Site: *site, Node: *node, Identity: plan.Identity{Serial: *serial}, Arch: "amd64", TPM: &id}
	script := o.server + "/ipxe?serial=" + *serial + "&site=" + *site
	forged := fmt.Sprintf("b1.0.%d.0123456789abcdef.%s", time.Now().Add(time.Hour).Unix(), strings.Repeat("5a", 16))
	var c, scripts codes
	challenged := 0
	send := func(hc *http.Client, i int) {
		kind, tok := "token", ""
		switch i % 6 {
		case 4:
			kind, tok = "forged", forged
		case 5:
			kind = "none"
		default:
			code, body, _ := flood.Do(ctx, hc, "GET", script, "", nil)
			scripts.add("", code)
			if m := tokenRe.FindStringSubmatch(body); m != nil {
				tok = m[1]
			}
		}
		code, body, _ := flood.Do(ctx, hc, "POST", o.server+plan.AgentCheckInPath, tok, in)
		c.add(kind, code)
		if code == 200 && strings.Contains(body, `"challenge"`) {
			c.mu.Lock()
			challenged++
			c.mu.Unlock()
		}
	}
	var p probe
	ask := func(i int) error {
		pc := flood.Client(o.probeFrom[i%len(o.probeFrom)], 1, 10*time.Second)
		defer pc.CloseIdleConnections()
		code, body, err := flood.Do(ctx, pc, "GET", script, "", nil)
		if err != nil {
			return err
		}
		m := tokenRe.FindStringSubmatch(body)
		if code != 200 || m == nil {
			return fmt.Errorf("script: %d %.200s", code, body)
		}
		code, body, err = flood.Do(ctx, pc, "POST", o.server+plan.AgentCheckInPath, m[1], in)
		var r plan.CheckInReply
		switch {
		case err != nil:
			return err
		case code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.Challenge == nil:
			return fmt.Errorf("check-in: %d %.200s", code, body)
		}
		return nil
	}
	took := o.flood(ctx, *count, send, &p, ask)
	return ChallengeSummary{CheckIns: c.m, Scripts: scripts.m[""], Challenged: challenged, ProbeSummary: p.summary(), Elapsed: round(took)}, nil
}

// tpmIdentity is the identity (EK, AK) of a simulated TPM (go-tpm-tools'
// reference simulator, as tpm/tpmtest makes it).
func tpmIdentity() (tpm.Identity, error) {
	sim, err := simulator.GetWithFixedSeedInsecure(1)
	if err != nil {
		return tpm.Identity{}, fmt.Errorf("TPM simulator: %w", err)
	}
	m, err := tpm.Open(sim) // closes sim, also when it fails
	if err != nil {
		return tpm.Identity{}, err
	}
	defer m.Close()
	return m.Identity()
}
