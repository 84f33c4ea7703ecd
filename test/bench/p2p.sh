#!/usr/bin/env bash
# Image delivery between machines (a site's imageDelivery: peers): N
# machines installing one image, on a LAN of network namespaces where every
# link is shaped with tc tbf (each machine -machine-mbit, the server
# -server-mbit, each way). Needs root (namespaces, veths, tc) and iproute2.
#
#   bash test/bench/p2p.sh [-n 50] [-image-mb 128] [-server-mbit 100] [-machine-mbit 100]
#                          [-modes alone,server,peers,torrent] [-torrent /tmp/p2ptorrent] [-keep]
#
# Modes, side by side in one run: alone (one machine: the time of one
# install), server (N machines all streaming the image from its URL over
# the server's uplink), peers (N machines fetching 4 MiB chunks from each
# other as the server's scheduler directs, the server the fallback) and,
# with -torrent BIN (built from test/bench/p2p/torrent, a module of its
# own), BitTorrent from a seed on the server.
#
# The figures, per mode: the fleet time (the slowest machine, from its
# agent's start to its power action; torrent: to its download complete),
# the median and fastest machine, when the image was on each disk, the
# bytes the server sent on its uplink (tx_bytes of its veth: everything,
# headers and API included) and that as a multiple of the image, the image
# bytes the machines got from the server and from peers (bootops: the
# status API; torrent: its own counts), failures (every disk's sha256 must
# be the image's, every node provisioned), the clients' peak RSS and
# bootops serve's CPU and peak RSS. Then the issue's ratios: fleet time
# (peers) / one machine alone (goal <= 2) and server bytes (peers) / image
# size (goal <= 3), and the same for torrent.
#
# In peers mode a machine holding the image lingers (site peers.linger)
# while others still fetch, so its power action, and the fleet time, wait
# for the last machine: the "image on disk" rows show each one's own
# finish.
#
# Work folder /var/tmp/p2p-bench (-keep keeps it: logs/, the repository,
# the server's state); namespaces p2p-sw, p2p-srv, p2p-m001…; all removed
# at the end, also on an error or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
  echo "p2p.sh: run as root (network namespaces, tc)" >&2
  exit 1
fi
go build -o bin/bootops ./cmd/bootops
go build -o /tmp/p2pbench ./test/bench/p2p
exec /tmp/p2pbench -bootops bin/bootops "$@"
