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
// nothing to do for a while. A peer that sends bad data is dropped for the whole swarm and
// counted; a peer that vanishes costs its transfer a retry elsewhere.
//
// The transport is plain HTTP: GET {base}/swarm/{image}/chunk/{i} with the
// swarm's key as bearer token, from the server or any peer alike.
package swarm
