// Package swarm lets machines that install the same OS image fetch it from
// each other instead of all from the boot server.
//
// The image is cut into chunks of the decompressed (raw) image by disk
// offset. The boot server decompresses the image once, after checking the
// sha256 Git gives for it, and describes it in a Manifest: the sha256 of
// every chunk, which chunks are all zeros, and the sha256 of the whole raw
// image. Every machine (a Peer) checks each chunk against the manifest
// before it writes it, writes zero chunks itself, reads the whole image
// back from its disk at the end and checks it against the manifest's
// sha256, and serves the chunks it holds to the others, from its disk.
//
// Which chunk a machine fetches from where is decided by the server's
// Scheduler: machines report what they hold and how their transfers went,
// and ask for work; the scheduler hands out the rarest chunks, each from
// a holder the machine already fetched from if it can (an open
// connection), else the least busy one, and the server itself only for
// chunks no machine holds yet (each about once) or when a machine has had
// nothing to do for a while. A peer that vanishes costs its transfer a
// retry elsewhere.
//
// A peer is dropped for the whole swarm only on the server's own evidence,
// never on another machine's word: any machine could lie about any peer.
// A machine's report that a chunk did not match (or that its source was
// gone or slow) counts only if the scheduler sent that machine for that
// chunk to that source, lately (the lease is under way, or ended less
// than a lease's time ago); other reports are ignored and counted
// (Stats.Unfounded), and their sender's later reports of bad chunks start
// nothing. A counted report makes the machine avoid that source itself,
// and makes the server fetch the chunk from the accused peer as any
// member would, in the background and a few at a time: if the bytes do
// not match the manifest, the peer is banned; if they do, it stays
// (Stats.Cleared); if the server gets no answer, it tries again a few
// times, then leaves it. Several machines' reports are not taken as
// evidence instead: an unknown machine's identity costs nothing, so one
// liar could be several reporters. The cost is a peer that lies to the
// machines and not to the server (or that the server cannot reach): it
// is not banned, but each machine it lied to avoids it, so it costs each
// at most the transfers it had under way from it.
//
// The transport is plain HTTP: GET {base}/swarm/{image}/chunk/{i} with the
// swarm's key as bearer token, from the server or any peer alike.
package swarm
