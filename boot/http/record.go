package http

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bootops/bootops/boot/status"
)

// DeliveryRecord is one machine's row of the delivery record: what an OEM
// ships with the machine and what the customer's receiving dock checks.
type DeliveryRecord struct {
	Site     string   `json:"site"`
	Node     string   `json:"node"`
	Serial   string   `json:"serial,omitempty"`
	MACs     []string `json:"macs,omitempty"`
	Hardware string   `json:"hardware,omitempty"`
	// Expectations: "met", "not met: …", or "none" (Git sets none).
	Expectations string     `json:"expectations"`
	QA           []QAResult `json:"qa,omitempty"`
	State        string     `json:"state"`
	// Image is the installed image's sha256, Install the install digest,
	// Revision the Git revision it came from.
	Image       string    `json:"image,omitempty"`
	Install     string    `json:"install,omitempty"`
	Revision    string    `json:"revision,omitempty"`
	Provisioned time.Time `json:"provisioned,omitzero"`
	Running     time.Time `json:"running,omitzero"`
	// Encryption is where its encrypted root stands (status.Machine's
	// summary: sealed, and whether its recovery key is escrowed); "" for
	// a node not known to be encrypted. Never a key, nor its ciphertext.
	Encryption string `json:"encryption,omitempty"`
	// Retired is when its retirement ended; Erased one line per disk it
	// erased (or failed to: status.Machine.Erasures); EraseCertificate
	// the signed certificate (bootops erase-cert verify checks it).
	Retired          time.Time `json:"retired,omitzero"`
	Erased           []string  `json:"erased,omitempty"`
	EraseCertificate string    `json:"eraseCertificate,omitempty"`
}

// QAResult is a QA action's outcome on the machine's last install, as the
// agent measured it.
type QAResult struct {
	Action string `json:"action"`
	Pass   bool   `json:"pass"`
	Result string `json:"result"`
}

// DeliveryRecords is the record of a site's nodes (every site: ""),
// provisioned since (zero: ever), by node.
func (s *Server) DeliveryRecords(site string, since time.Time) []DeliveryRecord {
	p := s.Plans.Current()
	if p == nil || s.View.Status == nil {
		return nil
	}
	var out []DeliveryRecord
	for _, m := range s.View.Status.Machines() {
		if m.Node == "" || site != "" && m.Site != site {
			continue
		}
		n := p.Node(m.Site, m.Node)
		r := DeliveryRecord{Site: m.Site, Node: m.Node, Serial: m.Serial, State: m.State, Hardware: m.Inventory.Summary(), Expectations: "none", Revision: m.Revision,
			Encryption: m.Encryption}
		if m.Inventory != nil {
			r.Serial = cmp.Or(m.Inventory.System.Serial, r.Serial)
			for _, nic := range m.Inventory.NICs {
				r.MACs = append(r.MACs, nic.MAC)
			}
		}
		if n != nil && n.Expect != nil && !n.Expect.Empty() {
			if unmet := n.Expect.Check(m.Inventory); len(unmet) > 0 {
				r.Expectations = "not met: " + strings.Join(unmet, "; ")
			} else {
				r.Expectations = "met"
			}
		}
		if m.Installed != nil {
			r.Image, r.Install = m.Installed.Image, m.Installed.Digest
		}
		evs := s.View.Status.Events(m.Key)
		r.QA, r.Provisioned, r.Running = lastInstall(evs)
		if m.Retired() {
			r.Retired = retiredAt(evs)
			r.EraseCertificate = m.EraseCertificate
			if m.Erasures != nil {
				for _, d := range m.Erasures.Disks {
					r.Erased = append(r.Erased, d.Line())
				}
			}
		}
		if !since.IsZero() && r.Provisioned.Before(since) && r.Retired.Before(since) {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Site+"/"+out[i].Node < out[j].Site+"/"+out[j].Node })
	return out
}

// lastInstall reads a node's timeline: its last install's QA results
// (the last word of each qa- action since the workflow was handed out),
// when it was provisioned, and when it first reported running after.
func lastInstall(evs []status.Event) (qa []QAResult, provisioned, running time.Time) {
	start := 0
	for i, e := range evs {
		if e.Installing {
			start = i
		}
	}
	byAction := map[string]int{}
	for _, e := range evs[start:] {
		switch {
		case strings.HasPrefix(e.Action, "qa-") && e.Kind == status.KindAgent && (e.State == "" && !e.Error || e.State == status.StateFailed):
			// Its log lines (the measured values) and its failure; not its
			// progress, its start, or a retry.
			r := QAResult{Action: e.Action, Pass: !e.Error, Result: e.Message}
			if i, ok := byAction[e.Action]; ok {
				qa[i] = r
			} else {
				byAction[e.Action] = len(qa)
				qa = append(qa, r)
			}
		case e.State == status.StateProvisioned:
			provisioned, running = e.Time, time.Time{}
		case e.State == status.StateRunning && running.IsZero() && !provisioned.IsZero():
			running = e.Time
		}
	}
	return qa, provisioned, running
}

// retiredAt is when a node's timeline last says it was retired.
func retiredAt(evs []status.Event) time.Time {
	for _, e := range slices.Backward(evs) {
		if e.State == status.StateRetired {
			return e.Time
		}
	}
	return time.Time{}
}

// deliveryRecord is GET /api/v1/report?site=S[&since=RFC3339][&format=csv]:
// the delivery record, as JSON or CSV (the dashboard's download).
func (s *Server) deliveryRecord(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			http.Error(w, fmt.Sprintf("since %q: want a time such as 2026-11-25T08:00:00Z", v), http.StatusBadRequest)
			return
		}
		since = t
	}
	recs := s.DeliveryRecords(q.Get("site"), since)
	if q.Get("format") != "csv" {
		if recs == nil {
			recs = []DeliveryRecord{} // [], not null
		}
		writeJSON(w, recs)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	name := "delivery"
	if site := q.Get("site"); site != "" {
		name += "-" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
				return r
			}
			return '-'
		}, site)
	}
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
	WriteDeliveryCSV(w, recs)
}

// DeliveryCSVHeader is the delivery record's CSV header.
var DeliveryCSVHeader = []string{"site", "node", "serial", "macs", "hardware", "expectations", "qa", "state", "image_sha256", "install_digest", "revision", "provisioned", "running", "encryption", "retired", "erased", "erase_certificate"}

// WriteDeliveryCSV writes recs as CSV, a header first. Every cell is text
// the machine or Git gave: a cell a spreadsheet would take for a formula
// is prefixed with a quote.
func WriteDeliveryCSV(w interface{ Write([]byte) (int, error) }, recs []DeliveryRecord) error {
	cw := csv.NewWriter(w)
	cw.Write(DeliveryCSVHeader)
	for _, r := range recs {
		var qa []string
		for _, x := range r.QA {
			verdict := "fail"
			if x.Pass {
				verdict = "pass"
			}
			qa = append(qa, x.Action+" "+verdict+": "+x.Result)
		}
		row := []string{r.Site, r.Node, r.Serial, strings.Join(r.MACs, " "), r.Hardware, r.Expectations, strings.Join(qa, "; "), r.State,
			r.Image, r.Install, r.Revision, stamp(r.Provisioned), stamp(r.Running), r.Encryption,
			stamp(r.Retired), strings.Join(r.Erased, "; "), r.EraseCertificate}
		for i, c := range row {
			row[i] = status.CSVCell(c)
		}
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
