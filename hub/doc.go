// Package hub carries the status events of many site daemons to one view,
// over NATS JetStream: each site daemon forwards what its status store
// keeps (its outbox: the store-and-forward buffer while the uplink is down)
// to a 1- or 3-server hub cluster, where the site's lane (lane.go) takes it
// into the site's own stream, BOOTOPS_SITE_<site>, deduplicated by the
// event's store epoch and sequence; every hub server reads each site's
// stream into the fleet's status and serves it like a site daemon does,
// read-only. Configuration still comes only from Git.
//
//	site daemon ── status.Durable (outbox) ── Forwarder ──TLS, nkey──▶ hub cluster: the gate (auth.go)
//	                                                               a lane per site: ingest → its stream
//	                                                               (JetStream, R1 or R3) → its reader
//	                                                                  │ every hub server
//	                                                                  ▼
//	                                                     View: /api/v1/status, dashboard
package hub

// Subjects and streams.
const (
	// SubjectPrefix + site is where a site publishes, and only there; the
	// hub's ingest takes its messages from there into the site's own
	// stream (SiteStream, on SiteSubject), which no site may publish on.
	SubjectPrefix    = "bootops.events."
	SitePrefix       = "bootops.site."
	SiteStreamPrefix = "BOOTOPS_SITE_"
	// Stream is where hubs before per-site streams kept every site's
	// messages, on StreamPrefix + site: a hub reads it once if it is there
	// and writes it no more.
	Stream       = "BOOTOPS_EVENTS"
	StreamPrefix = "bootops.stream."
	// Kind is the header that says what a message is: KindEvent (a status
	// event, JSON) or KindHello (a site's summary, JSON); KindMark asks
	// the hub for the highest sequence of the site's epoch it applied
	// (answered with a MarkAnswer, nothing stored).
	Kind      = "Bootops-Kind"
	KindEvent = "event"
	KindHello = "hello"
	KindMark  = "mark"
	// Seq and Prev are an event's store sequence at its site and the one
	// sent before it (0: the first this forwarder sent since it started).
	// A publish that failed and was sent again lands after the ones that
	// followed it; the view puts them back in order by these.
	Seq  = "Bootops-Seq"
	Prev = "Bootops-Prev"
	// Epoch is the identity of the site's status store (random, made
	// with it): a store wiped and made anew starts its sequence at 1
	// again, under another epoch. The hub keeps a site's sequence per
	// epoch. Empty: a forwarder that has none (as before epochs).
	Epoch = "Bootops-Epoch"
)

// ValidEpoch says whether e can be an epoch: up to 64 letters, digits,
// '-' and '_' (or none).
func ValidEpoch(e string) bool {
	if len(e) > 64 {
		return false
	}
	for _, r := range e {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Inbox is where site's forwarder hears the hub's answers
// (nats.CustomInboxPrefix): the one subject tree the site may subscribe to.
func Inbox(site string) string { return "_INBOX_" + site }
