// Package daemon runs `bootops serve`: the planes a site's boot server is
// made of (the reconciler and its source, the status store, HTTP and
// HTTPS, DHCP, TFTP, power, the swarm, the dashboard, the hub forwarder),
// each built from its own typed Config, joined in one errgroup by Run.
//
// cmd/bootops parses flags, BOOTOPS_* variables and the config file into a
// Config; nothing here reads flags.
package daemon
