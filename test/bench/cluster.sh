#!/usr/bin/env bash
# A site of three daemons (BENCHMARKS.md, "A site with more than one
# server"): what a check-in writes before its answer, into the cluster and
# into one daemon's bbolt store, same run; the DHCP role's takeover over 20
# kills of its holder. On loopback only (127.0.0.1:17421-17423).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p test/bench/results
go run ./test/bench/cluster -n "${N:-2000}" -c "${C:-16}" -kills "${KILLS:-20}" | tee test/bench/results/cluster.json
