package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	bhttp "github.com/bootops/bootops/boot/http"
	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/reconciler"
	"github.com/bootops/bootops/trust"
)

func statusCmd() *command {
	c := &command{
		name:    "status",
		summary: "Show the served revision and where every node stands, from a running daemon.",
		usage:   "[--server URL] [-o table|json] [--watch] [--unknown] [--wait REV [--timeout D]]",
		example: "  bootops status --server http://127.0.0.1:8080\n  bootops status -o json | jq '.nodes[] | select(.state==\"mismatch\")'\n" +
			"  bootops status --watch                            # refreshes every 2 s\n" +
			"  bootops status --unknown                          # unknown machines, with a Node to commit for each\n" +
			"  bootops status --wait \"$(git rev-parse HEAD)\"   # after a push: exit 0 once served, 1 if refused",
	}
	c.run = func(ctx context.Context, e *env, args []string) error {
		fs := c.flags(e)
		server := serverFlag(fs, e, defaultServer)
		format := fs.String("o", "table", "output: table or json")
		wait := fs.String("wait", "", "wait until this revision (a commit SHA or its prefix) is served (exit 0) or refused (exit 1)")
		timeout := fs.Duration("timeout", 2*time.Minute, "with --wait: how long to wait")
		watch := fs.Bool("watch", false, "refresh the table every 2 s until interrupted")
		unknown := fs.Bool("unknown", false, "show the machines that are no node, each with a Node object to commit")
		if err := parseNone(fs, e, args); err != nil {
			return err
		}
		if *unknown {
			var doc statusDoc
			if _, err := fetchStatus(ctx, strings.TrimSuffix(*server, "/")+"/api/v1/status", &doc); err != nil {
				return noAnswer(*server, err)
			}
			printUnknown(e.stdout, doc.Machines)
			return nil
		}
		if *watch {
			return watchStatus(ctx, e, strings.TrimSuffix(*server, "/")+"/api/v1/status")
		}
		if *format != "table" && *format != "json" {
			return usagef("-o %q: want table or json", *format)
		}
		url := strings.TrimSuffix(*server, "/") + "/api/v1/status"
		if *format == "json" {
			url += "?inventory=1" // each machine's hardware too
		}
		var body []byte
		var doc statusDoc
		var err error
		if *wait == "" {
			if body, err = fetchStatus(ctx, url, &doc); err != nil {
				return noAnswer(*server, err)
			}
		} else {
			deadline := time.Now().Add(*timeout)
			for {
				body, err = fetchStatus(ctx, url, &doc)
				if err == nil && (hasPrefix(doc.Source.Applied.Revision, *wait) || refused(doc.Source.Attempted, *wait)) {
					break
				}
				if time.Now().After(deadline) {
					if err != nil {
						return fmt.Errorf("--wait %s: no answer from %s after %s: %w", *wait, *server, *timeout, err)
					}
					return fmt.Errorf("--wait %s: not served after %s (serving %s)", *wait, *timeout, or(doc.Source.Applied.Revision, "nothing"))
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		if *format == "json" {
			_, err = e.stdout.Write(body)
		} else {
			printStatus(e.stdout, doc)
		}
		if err == nil && *wait != "" && !hasPrefix(doc.Source.Applied.Revision, *wait) {
			return errSilent // refused: the status above says why
		}
		return err
	}
	return c
}

// watchStatus redraws the table every 2 s (in place on a terminal).
func watchStatus(ctx context.Context, e *env, url string) error {
	tty := false
	if f, ok := e.stdout.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	for {
		var doc statusDoc
		var buf strings.Builder
		if _, err := fetchStatus(ctx, url, &doc); err != nil {
			fmt.Fprintf(&buf, "%s: no answer: %v\n", time.Now().Format("15:04:05"), err)
		} else {
			printStatus(&buf, doc)
		}
		if tty {
			io.WriteString(e.stdout, "\033[H\033[2J")
		} else {
			fmt.Fprintf(e.stdout, "--- %s\n", time.Now().Format(time.DateTime))
		}
		io.WriteString(e.stdout, buf.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}

// printUnknown lists the machines that are no node, each with a Node
// object that registers it (`bootops enroll` writes it to a file).
func printUnknown(w io.Writer, ms []status.Machine) {
	if len(ms) == 0 {
		fmt.Fprintln(w, "no unknown machines")
		return
	}
	for _, m := range ms {
		fmt.Fprintf(w, "# %s (%s): %s\n", status.Printable(m.Key), status.Printable(m.State), firstLine(m.Last.Message))
		fmt.Fprintf(w, "# bootops enroll %s -o sites/%s/nodes\n", status.Printable(m.Key), status.Printable(or(m.Site, "SITE")))
		y, err := status.NodeYAML(m, "")
		if err != nil {
			y = "# " + err.Error()
		}
		fmt.Fprintln(w, y)
		fmt.Fprintln(w, "---")
	}
}

func hasPrefix(rev, want string) bool { return rev != "" && strings.HasPrefix(rev, want) }

func refused(a reconciler.Attempt, want string) bool {
	return a.Result == reconciler.ResultRefused && hasPrefix(a.Revision, want)
}

// fetchStatus GETs the status document into doc and returns its bytes.
// It decodes into a fresh document and replaces doc only then: decoding
// into a reused one (--wait's loop) kept a field a later reply omits
// (a node's power, omitempty) from the row that was there before.
func fetchStatus(ctx context.Context, url string, doc *statusDoc) ([]byte, error) {
	body, err := get(ctx, url)
	if err != nil {
		return nil, err
	}
	var fresh statusDoc
	if err := json.Unmarshal(body, &fresh); err != nil {
		return nil, fmt.Errorf("not a status document: %w", err)
	}
	*doc = fresh
	return body, nil
}

// get fetches a daemon's API document (at most 64 MiB).
func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, usagef("--server: %v", err)
	}
	// A daemon's reads, and a hub's view, ask for an operator's token.
	if t := readToken(envOf(ctx)); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	client, err := apiClient(envOf(ctx), 10*time.Second)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		why, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		return nil, credentialRefused{fmt.Errorf("%s: %.300s (set BOOTOPS_TOKEN, or BOOTOPS_TOKEN_FILE to a file holding the token, or over HTTPS BOOTOPS_CERT and BOOTOPS_KEY to an operator's certificate; on the daemon's machine %s is read by default)",
			resp.Status, status.Printable(why), defaultTokenFile)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	return body, nil
}

type envKey struct{}

// withEnv carries the command's environment to the API calls it makes.
func withEnv(ctx context.Context, e *env) context.Context { return context.WithValue(ctx, envKey{}, e) }

// envOf is the environment's getenv withEnv carried (os.Getenv without).
func envOf(ctx context.Context) func(string) string {
	if e, ok := ctx.Value(envKey{}).(*env); ok && e != nil && e.getenv != nil {
		return e.getenv
	}
	return os.Getenv
}

// credentialRefused is an answer that refused the credential: the daemon is there.
type credentialRefused struct{ error }

// noAnswer is a failed API call as the commands say it: a refusal as it
// is, anything else with the hint that the daemon may not be there.
func noAnswer(server string, err error) error {
	var r credentialRefused
	if errors.As(err, &r) {
		return fmt.Errorf("%s: %w", server, err)
	}
	return fmt.Errorf("no answer from %s: %w (is `bootops serve` running there?)", server, err)
}

// defaultTokenFile is the operator token serve makes in its default state
// folder (--state-dir).
const defaultTokenFile = "/var/lib/bootops/operator-token"

// apiClient is the HTTP client of the daemon's API: over HTTPS, the site
// CA in $BOOTOPS_CA verifies the server (else the system's roots), and an
// operator's certificate of the site CA ($BOOTOPS_CERT, $BOOTOPS_KEY;
// `bootops ca operator` makes one) is presented when given.
func apiClient(getenv func(string) string, timeout time.Duration) (*http.Client, error) {
	cert, key, ca := getenv("BOOTOPS_CERT"), getenv("BOOTOPS_KEY"), getenv("BOOTOPS_CA")
	if cert == "" && key == "" && ca == "" {
		return &http.Client{Timeout: timeout}, nil
	}
	cfg, err := trust.ClientTLS(cert, key, ca)
	if err != nil {
		return nil, usagef("BOOTOPS_CERT, BOOTOPS_KEY, BOOTOPS_CA: %v", err)
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: http.ProxyFromEnvironment}}, nil
}

// readToken is the operator's token for the daemon's API: $BOOTOPS_TOKEN,
// else the file $BOOTOPS_TOKEN_FILE names, else the default state
// folder's operator token when this user may read it; "" when none.
func readToken(getenv func(string) string) string {
	if t := strings.TrimSpace(getenv("BOOTOPS_TOKEN")); t != "" {
		return t
	}
	f := getenv("BOOTOPS_TOKEN_FILE")
	if f == "" {
		f = defaultTokenFile
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// statusDoc is GET /api/v1/status as the CLI reads it.
type statusDoc struct {
	Source   reconciler.Status `json:"source"`
	Plan     string            `json:"plan"`
	Nodes    []status.Machine  `json:"nodes"`
	Machines []status.Machine  `json:"unknown"`
	// Sites: a hub's site daemons.
	Sites []bhttp.SiteStatus `json:"sites"`
	// Rollouts: groups with out-of-date nodes, a rollout or a halt.
	Rollouts []bhttp.RolloutStatus `json:"rollouts"`
	// Cluster: a site of more than one daemon, as the one asked sees it.
	Cluster *bhttp.ClusterStatus `json:"cluster"`
}

// printRollouts is a line per rollout group worth showing.
func printRollouts(w io.Writer, rs []bhttp.RolloutStatus) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLLOUT	STRATEGY	OUT OF DATE	IN PROGRESS	STATE")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%d\t%s\n", status.Printable(r.Site), status.Printable(r.Profile), r.Strategy, r.OutOfDate, r.InProgress, status.Printable(firstLine(r.Summary)))
	}
	tw.Flush()
}

// printSites is a hub's head: each site, when it was last heard, and for
// a site of more than one daemon how many of its members are up; then
// each such site's cluster line.
func printSites(w io.Writer, sites []bhttp.SiteStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tLAST HEARD\tDAEMON\tMEMBERS\tPLAN\tEVENTS\tUNSENT")
	for _, s := range sites {
		heard := "never"
		if !s.LastHeard.IsZero() {
			heard = time.Since(s.LastHeard).Round(time.Second).String() + " ago"
		}
		members := "-"
		if c := s.Cluster; c != nil {
			up := 1
			for _, m := range c.Members {
				if !m.Offline {
					up++
				}
			}
			members = fmt.Sprintf("%d of %d up", up, c.Size)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", status.Printable(s.Name), heard, status.Printable(or(s.Daemon, "-")), members, or(shortRev(s.Plan), "-"), s.Events, s.Pending)
	}
	tw.Flush()
	for _, s := range sites {
		if s.Cluster != nil {
			fmt.Fprintf(w, "%s ", status.Printable(s.Name))
			printCluster(w, s.Cluster)
		}
	}
}

func printStatus(w io.Writer, doc statusDoc) {
	if len(doc.Sites) > 0 {
		printSites(w, doc.Sites)
		printNodes(w, doc)
		return
	}
	src := doc.Source
	where := src.URL
	if src.Ref != "" {
		where += " @ " + src.Ref
	}
	fmt.Fprintf(w, "source:   %s\n", where)
	fmt.Fprintf(w, "serving:  %s", or(src.Applied.Revision, "nothing yet"))
	if src.Applied.Message != "" {
		fmt.Fprintf(w, " %q", src.Applied.Message)
	}
	if !src.Applied.At.IsZero() {
		fmt.Fprintf(w, " (applied %s)", src.Applied.At.Local().Format(time.DateTime))
	}
	if src.Restored {
		fmt.Fprintf(w, " [kept plan, not yet confirmed by the source]")
	}
	fmt.Fprintln(w)
	printCluster(w, doc.Cluster)
	if src.Stale {
		fmt.Fprintf(w, "STALE:    %s\n", src.Reason)
	}
	if a := src.Attempted; a.Result == reconciler.ResultRefused {
		fmt.Fprintf(w, "refused:  %s (%s): %s\n", a.Revision, a.At.Local().Format(time.DateTime), a.Error)
		for i, e := range a.Errors {
			if i == 10 {
				fmt.Fprintf(w, "          … and %d more\n", a.Total-10)
				break
			}
			fmt.Fprintf(w, "          %s\n", e)
		}
	}
	if len(src.History) > 0 {
		fmt.Fprintf(w, "\nlast reconciles:\n")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tREVISION\tRESULT\tNODES\tDURATION\tMESSAGE")
		for _, a := range src.History {
			msg := a.Message
			if a.Error != "" {
				msg = a.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f ms\t%s\n", a.At.Local().Format("15:04:05"), shortRev(a.Revision), a.Result, a.Nodes, a.DurationMS, firstLine(msg))
		}
		tw.Flush()
	}
	printRollouts(w, doc.Rollouts)
	printNodes(w, doc)
}

// printNodes is the table of nodes and unknown machines. SYNC shows when a
// node was installed, POWER when one has a BMC, IMAGE FROM when one
// fetched its image with its peers.
func printNodes(w io.Writer, doc statusDoc) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	sync := slices.ContainsFunc(doc.Nodes, func(n status.Machine) bool { return n.Sync != "" })
	power := slices.ContainsFunc(doc.Nodes, func(n status.Machine) bool { return n.Power != "" })
	image := slices.ContainsFunc(doc.Nodes, func(n status.Machine) bool { return n.Image != nil })
	head := []string{"NODE", "SITE", "STATE", "ACTION", "PROGRESS", "ELAPSED", "SEEN", "BOOT"}
	if sync {
		head = append(head, "SYNC")
	}
	if power {
		head = append(head, "POWER")
	}
	if image {
		head = append(head, "IMAGE FROM")
	}
	fmt.Fprintln(tw, strings.Join(append(head, "LAST MESSAGE"), "\t"))
	for _, n := range doc.Nodes {
		seen := "-"
		if !n.Last.Time.IsZero() {
			seen = n.Last.Time.Local().Format("15:04:05")
		}
		action, prog := "-", "-"
		if l := n.Last; l.Steps > 0 && (n.State == status.StateProvisioning || n.State == status.StateCommissioning || n.State == status.StateFailed) {
			action = fmt.Sprintf("%d/%d %s", l.Step, l.Steps, l.Action)
			if l.Total > 0 {
				prog = fmt.Sprintf("%d%%", l.Bytes*100/l.Total)
			} else if l.Bytes > 0 {
				prog = fmt.Sprintf("%d MB", l.Bytes>>20)
			}
		}
		row := []string{n.Node, n.Site, n.State, action, prog, elapsed(n), seen, or(n.Boot, "-")}
		if sync {
			row = append(row, or(n.Sync, "-"))
		}
		if power {
			row = append(row, or(n.Power, "-"))
		}
		if image {
			row = append(row, imageFrom(n.Image))
		}
		for i := range row {
			row[i] = status.Printable(row[i])
		}
		fmt.Fprintln(tw, strings.Join(append(row, firstLine(n.Last.Message)), "\t"))
	}
	tw.Flush()
	printHeld(w, doc.Nodes)
	if len(doc.Machines) > 0 {
		fmt.Fprintf(w, "\nunknown machines:\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MAC\tUUID\tSERIAL\tSTATE\tLAST MESSAGE")
		for _, m := range doc.Machines {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", status.Printable(or(m.MAC, "-")), status.Printable(or(m.UUID, "-")), status.Printable(or(m.Serial, "-")), status.Printable(m.State), firstLine(m.Last.Message))
		}
		tw.Flush()
	}
}

// printCluster is one line on a site of more than one daemon: the member
// asked, the leader, the majority, who answers DHCP, the others' state.
func printCluster(w io.Writer, c *bhttp.ClusterStatus) {
	if c == nil {
		return
	}
	q := "with a majority"
	if !c.Quorum {
		q = "NO MAJORITY: refusing check-ins"
	}
	fmt.Fprintf(w, "cluster:  member %s of %d, leader %s, %s", status.Printable(c.Member), c.Size, or(status.Printable(c.Leader), "none"), q)
	roles := slices.Sorted(maps.Keys(c.Roles))
	for _, r := range roles {
		fmt.Fprintf(w, "; %s: %s", status.Printable(r), status.Printable(c.Roles[r]))
	}
	for _, m := range c.Members {
		st := "current"
		switch {
		case m.Offline:
			st = "offline"
		case !m.Current:
			st = fmt.Sprintf("behind by %d", m.Lag)
		}
		fmt.Fprintf(w, "; %s %s", status.Printable(m.Name), st)
	}
	// The revision each member serves: one when they agree.
	revs := map[string]bool{}
	for _, r := range c.Serving {
		revs[r] = true
	}
	switch names := slices.Sorted(maps.Keys(c.Serving)); {
	case len(revs) == 1:
		fmt.Fprintf(w, "; serving %s", status.Printable(shortRev(c.Serving[names[0]])))
	case len(revs) > 1:
		fmt.Fprintf(w, "; NOT THE SAME REVISION:")
		for i, n := range names {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(w, "%s %s %s", sep, status.Printable(n), status.Printable(shortRev(c.Serving[n])))
		}
	}
	fmt.Fprintln(w)
}

// printHeld says, whole, why each held node waits: the table's last
// message is cut at 100 characters and may be a later event's.
func printHeld(w io.Writer, nodes []status.Machine) {
	var held []status.Machine
	for _, n := range nodes {
		if n.State == status.StateHeld && n.Held != "" {
			held = append(held, n)
		}
	}
	if len(held) == 0 {
		return
	}
	fmt.Fprintf(w, "\nheld:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range held {
		fmt.Fprintf(tw, "  %s/%s\t%s\n", status.Printable(n.Site), status.Printable(n.Node), status.Printable(n.Held))
	}
	tw.Flush()
}

// imageFrom says where a node's image came from: "server 12 MB, peers
// 500 MB".
func imageFrom(i *status.ImageSources) string {
	if i == nil {
		return "-"
	}
	return fmt.Sprintf("server %s, peers %s", megabytes(i.FromServer), megabytes(i.FromPeers))
}

func megabytes(n int64) string {
	if n > 0 && n < 1<<20 {
		return "<1 MB"
	}
	return fmt.Sprintf("%d MB", n>>20)
}

// elapsed is how long a node has been in the Micro-OS or provisioning.
func elapsed(m status.Machine) string {
	switch m.State {
	case status.StateBooting, status.StateMicroOS, status.StateProvisioning, status.StateCommissioning:
	default:
		return "-"
	}
	if m.Since.IsZero() {
		return "-"
	}
	return time.Since(m.Since).Round(time.Second).String()
}

func shortRev(r string) string {
	if len(r) == 40 {
		return r[:12]
	}
	return r
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	s = status.Printable(s) // whatever a machine sent, escaped
	if len(s) > 100 {
		s = s[:97] + "..."
	}
	return s
}
