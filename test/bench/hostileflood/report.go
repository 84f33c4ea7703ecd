package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/test/flood"
)

// ReportSummary counts the reports' answers by kind and status: real (the
// node's credential, the report its OS sends), claim (the node's
// credential, another install's digest), forged (the node's credential
// with its signature changed), other (another node's real credential).
type ReportSummary struct {
	Reports map[string]map[int]int `json:"reports"`
	ProbeSummary
	Elapsed string `json:"elapsed"`
}

// report sends -count reports for one provisioned node, a sixth of each
// claim, forged and other, the rest real, while the probe GETs -probe.
func report(args []string) (any, error) {
	o := httpFlags("report")
	token := o.flags.String("token", "", "the node's report credential (its report script's)")
	other := o.flags.String("other-token", "", "another node's report credential")
	site := o.flags.String("site", "lab", "the node's site")
	node := o.flags.String("node", "", "the node")
	install := o.flags.String("install", "", "the install digest its report script carries")
	count := o.flags.Int("count", 3600, "reports to send (at most 20000)")
	probePath := o.flags.String("probe", "/healthz", "what the probe GETs")
	if err := o.parse(args); err != nil {
		return nil, err
	}
	if *token == "" || *other == "" || *node == "" || *count > 20000 {
		return nil, fmt.Errorf("want -token, -other-token, -node and -count of at most 20000")
	}
	forged, err := tamper(*token)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.deadline)
	defer cancel()
	good := plan.OSReport{Site: *site, Node: *node, InstanceID: *node + "-0", Hostname: *node, Kernel: "6.1.0-28-amd64",
		Addresses: []string{"198.18.2.50"}, Install: *install, CloudInit: "done"}
	claim := good
	claim.Install = strings.Repeat("0f", 32)
	var c codes
	send := func(hc *http.Client, i int) {
		kind, tok, rep := "real", *token, good
		switch i % 6 {
		case 3:
			kind, rep = "claim", claim
		case 4:
			kind, tok = "forged", forged
		case 5:
			kind, tok = "other", *other
		}
		code, _, _ := flood.Do(ctx, hc, "POST", o.server+plan.ReportPath, tok, rep)
		c.add(kind, code)
	}
	pc := flood.Client(o.probeFrom[0], 1, 10*time.Second)
	var p probe
	ask := func(int) error {
		code, body, err := flood.Do(ctx, pc, "GET", o.server+*probePath, "", nil)
		if err == nil && code != 200 {
			err = fmt.Errorf("%d %.200s", code, body)
		}
		return err
	}
	took := o.flood(ctx, *count, send, &p, ask)
	return ReportSummary{Reports: c.m, ProbeSummary: p.summary(), Elapsed: round(took)}, nil
}

// tamper changes a credential's signature (its last field, hex).
func tamper(tok string) (string, error) {
	i := strings.LastIndexByte(tok, '.')
	if i < 0 || i == len(tok)-1 {
		return "", fmt.Errorf("-token %q: not a credential", tok)
	}
	last := byte('0')
	if tok[len(tok)-1] == '0' {
		last = '1'
	}
	return tok[:len(tok)-1] + string(last), nil
}
