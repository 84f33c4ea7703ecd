package swarm

import "strconv"

// What a Peer and the Scheduler say to each other: the peer POSTs a Report
// to the server's swarm endpoint and gets a Reply.

// Report is what a peer says about itself: where it serves, what it
// holds since its last report, how its transfers went, and how many more
// it can take.
type Report struct {
	// Instance names this life of the peer: a machine that starts again
	// holds nothing of what it held before.
	Instance string `json:"instance"`
	// Addr is host:port of the peer's chunk server ("" serves nothing).
	Addr string `json:"addr,omitempty"`
	// Have are the chunks written and verified since the last report.
	Have []int `json:"have,omitempty"`
	// Lost are chunks it held and no longer serves (changed on disk).
	Lost []int `json:"lost,omitempty"`
	// Done and Failed close the transfers the scheduler assigned.
	Done   []Transfer `json:"done,omitempty"`
	Failed []Transfer `json:"failed,omitempty"`
	// Want is how many more transfers it can start now.
	Want int `json:"want,omitempty"`
	// Complete says it holds the whole image; Leaving that it stops
	// serving now.
	Complete bool `json:"complete,omitempty"`
	Leaving  bool `json:"leaving,omitempty"`
}

// Transfer is one chunk moved, or not, from a source ("" for the server)
// to the reporting peer.
type Transfer struct {
	Chunk int    `json:"chunk"`
	From  string `json:"from,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	// Why a transfer failed: WhyBad, WhyGone or WhySlow.
	Why string `json:"why,omitempty"`
}

// Why a transfer failed.
const (
	WhyBad  = "bad"  // the bytes did not match the chunk's sha256: the server checks the source
	WhyGone = "gone" // no answer, an error, or a connection lost
	WhySlow = "slow" // slower than the least rate a transfer must keep
)

// Reply is the scheduler's answer.
type Reply struct {
	Assign []Assignment `json:"assign,omitempty"`
	// Key is the swarm's credential: peers and the server serve chunks to
	// bearers of it only.
	Key string `json:"key"`
	// Fetching is how many other members are still fetching: a complete
	// peer lingers while it is not 0.
	Fetching int `json:"fetching"`
	// Holds is how many chunks the scheduler knows the peer holds: when
	// the peer holds another number, it sends its whole Have next.
	Holds int `json:"holds"`
	// Banned says the server no longer schedules anything to or from this
	// peer (the server fetched a chunk from it that did not match).
	Banned bool `json:"banned,omitempty"`
}

// Assignment is a chunk to fetch, and from where: From is the holder's
// name ("" for the server), URL the base URL to fetch it from.
type Assignment struct {
	Chunk int    `json:"chunk"`
	From  string `json:"from,omitempty"`
	URL   string `json:"url"`
}

// ChunkPath is the path of chunk i of the image named source, below a
// server's or peer's base URL.
func ChunkPath(source string, i int) string {
	return "/swarm/" + source + "/chunk/" + strconv.Itoa(i)
}
