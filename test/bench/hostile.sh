#!/usr/bin/env bash
# bootops under attack from the LAN, side by side with a reference bootops
# (REF, default 18034da: the last commit before the status store held nodes
# and unknown machines apart) in the same run. Each daemon serves 20 nodes a
# simulated fleet provisions first, under a 1,024 open-files limit; then
# test/e2e/lanflood sends 50,000 made-up machines from 50 loopback
# addresses, holds 1,000 idle connections and 200 slow bodies, and a probe
# asks for a provisioned node's script every second. All on 127.0.0.0/8,
# bounded in count (IDENTITIES) and time (10 min).
# The table goes to test/bench/results/hostile.md.
#
#   bash test/bench/hostile.sh
#   REF=HEAD~1 IDENTITIES=20000 bash test/bench/hostile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ref=${REF:-18034da}
results=test/bench/results
mkdir -p "$results"
work=$(mktemp -d)
cleanup() { set +e; git worktree remove --force "$work/ref" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/bootops" ./cmd/bootops
go build -o "$work/lanflood" ./test/e2e/lanflood
git worktree add --detach "$work/ref" "$ref" >/dev/null
(cd "$work/ref" && go build -o "$work/reference" ./cmd/bootops)
{
  echo "bootops $(git rev-parse --short HEAD) and the reference $(git rev-parse --short "$ref"), $(nproc) cores; \`bash test/bench/hostile.sh\`"
  echo
  go run ./test/bench/hostile -bootops "$work/bootops" -reference "$work/reference" -reference-name "bootops $(git rev-parse --short "$ref") (reference)" \
    -flood "$work/lanflood" -identities "${IDENTITIES:-50000}"
} | tee "$results/hostile.md"
