#!/usr/bin/env bash
# A download across a WAN (50 ms each way, 1 % loss, 20 Mbit/s by default):
# curl beside the agent's resumable download (agent.Fetch), for goodput and
# across a cut of the link, in network namespaces of its own (package
# wanem shapes the link: no netem needed). Needs root, iproute2 and curl.
#
#   bash test/bench/wan.sh [-mib 64] [-delay 50ms] [-loss 1] [-mbit 20] [-cut 20s] [-rounds 1] [-timeout 10m]
#
# Prints Markdown tables (test/bench/wan/main.go says what each column
# is); a copy goes to test/bench/results/wan.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
  echo "wan.sh: run as root (network namespaces, TUN devices)" >&2
  exit 1
fi
bash test/deps.sh iproute2 curl
mkdir -p test/bench/results
go build -o /tmp/wanbench ./test/bench/wan
/tmp/wanbench "$@" | tee test/bench/results/wan.md
