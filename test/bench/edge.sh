#!/usr/bin/env bash
# Edge nodes' power-on to running (BENCHMARKS.md, "Edge nodes over the
# Internet"): one OVMF VM installs and runs the Debian test image from its
# USB stick across the WAN lab's link, unshaped and then shaped (50 ms each
# way, 1 % loss, 20 Mbit/s), one after the other. Needs root, QEMU and the
# lab's packages (make lab-deps); about 15 minutes on 2 cores under TCG.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
  echo "edge.sh: run as root (network namespaces, VMs)" >&2
  exit 1
fi
mkdir -p test/bench/results
go test -count=1 -tags 'e2e edgebench' -timeout 90m -run 'TestEdgeBench$' -v ./test/e2e 2>&1 | tee test/bench/results/edge.txt
