// Package ui serves the dashboard: one page (embedded, no CDN: it works on
// a warehouse LAN with no way out) and a stream of the fleet's changes as
// Server-Sent Events. The page gets the whole fleet once, then only the
// machines that changed, at most every Interval; a node's page follows
// that node's timeline the same way. Nothing is polled.
//
// The page is read-only. The one action it offers (fetch the source now)
// needs the token the daemon was started with.
package ui
