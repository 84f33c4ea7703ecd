#!/usr/bin/env bash
# The performance goals of BENCHMARKS.md's "Goals" table, each measured
# beside its reference in one run, then a table of goal against measured:
#
#   push → live, webhook to served, p50 < 100 ms at 10,000 and at 50,000
#     nodes (test/bench/pushlive; reference at 10,000: a fresh
#     `git clone --depth 1` and `bootops validate` per push);
#   50 machines × 128 MiB fetching the image from each other: fleet time
#     ≤ 1.5 × one machine alone, the server ≤ 1.1 images (test/bench/p2p,
#     modes alone and peers; needs root; the host's CPU bound is printed
#     beside it);
#   the hub: ≥ 10,000 events/s into its view with tenancy and per-site
#     lanes on (test/bench/hub; reference: plain JetStream async publish).
#
#   bash test/bench/goals.sh            # all three, about 8 minutes
#   ONLY=push|peers|hub bash test/bench/goals.sh
#
# Raw output: test/bench/results/goals-*.txt; the table: goals.md there.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash test/deps.sh git
out=test/bench/results
mkdir -p "$out"
go build -o bin/bootops ./cmd/bootops
only=${ONLY:-}
rows=()
num() { grep -oE "$1" | head -1 | grep -oE '[0-9]+(\.[0-9]+)?' | "${2:-head}" -1; }
holds() { awk -v m="$1" -v g="$2" -v op="$3" 'BEGIN { if ((op == "<" && m < g) || (op == "<=" && m <= g) || (op == ">=" && m >= g)) print "yes"; else print "**no**" }'; }

if [ -z "$only" ] || [ "$only" = push ]; then
  go run ./test/bench/pushlive -bootops bin/bootops -nodes 10000 -sites 50 -pushes 20 2>&1 | grep -v '"level":"WARN"' | tee "$out/goals-push10k.txt"
  go run ./test/bench/pushlive -bootops bin/bootops -nodes 50000 -sites 100 -pushes 20 -reference=false 2>&1 | grep -v '"level":"WARN"' | tee "$out/goals-push50k.txt"
  for n in 10k 50k; do
    p50=$(num 'served, [0-9]+ pushes: p50 [0-9.]+' tail < "$out/goals-push$n.txt")
    ref=$(num 'per push: p50 [0-9.]+' tail < "$out/goals-push$n.txt" || true)
    reftext=-
    [ -n "$ref" ] && reftext="clone + validate: ${ref} ms"
    rows+=("| push → live, ${n/k/,000} nodes: webhook → served p50 | < 100 ms | ${p50} ms | ${reftext} | $(holds "$p50" 100 '<') |")
  done
fi

if [ -z "$only" ] || [ "$only" = peers ]; then
  bash test/bench/p2p.sh -n 50 -image-mb 128 -modes alone,peers 2>&1 | tee "$out/goals-peers.txt"
  ratio=$(num 'peers: fleet time / one machine alone = [0-9.]+ / [0-9.]+ = [0-9.]+' tail < "$out/goals-peers.txt")
  images=$(num 'peers: server bytes / image size = [0-9.]+ MB / [0-9.]+ MB = [0-9.]+' tail < "$out/goals-peers.txt")
  bound=$(num 'allows no less than [0-9.]+ s = [0-9.]+' tail < "$out/goals-peers.txt")
  rows+=("| 50 × 128 MiB by peers: fleet time / one machine | ≤ 1.5× | ${ratio}× | the host's CPUs allow no less than ${bound}× | $(holds "$ratio" 1.5 '<=') |")
  rows+=("| 50 × 128 MiB by peers: images the server sent | ≤ 1.1 | ${images} | - | $(holds "$images" 1.1 '<=') |")
fi

if [ -z "$only" ] || [ "$only" = hub ]; then
  go run ./test/bench/hub -bootops bin/bootops -sites 50 -machines 200 -cut 10 2>&1 | tee "$out/goals-hub.txt"
  rate=$(num "view after [^:]*: [0-9]+ events/s" tail < "$out/goals-hub.txt")
  ref=$(num 'stream, one embedded server, no TLS: [^,]*, [0-9]+ messages/s' tail < "$out/goals-hub.txt")
  rows+=("| the hub: events into its view, 50 sites, tenancy and lanes on | ≥ 10,000/s | ${rate}/s | plain JetStream publish: ${ref}/s | $(holds "$rate" 10000 '>=') |")
fi

{
  echo "Goals, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD), $(grep -m1 '^machine:' "$out"/goals-push10k.txt 2>/dev/null || nproc) "
  echo
  echo "| goal | target | measured | reference, same run | holds |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} | tee "$out/goals.md"
