#!/usr/bin/env bash
# Reconciler benchmark: push-to-live latency through the webhook, and the
# daemon's memory, with `git daemon` on loopback as the Git server
# (test/bench/pushlive). The reference, in the same run: per push, a fresh
# `git clone --depth 1` and `bootops validate` — what a cron job would do
# before it could swap anything in.
#
#   bash test/bench/gitops.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash test/deps.sh git
go build -o bin/bootops ./cmd/bootops
echo "## 1,000 nodes, 10 sites, 50 pushes"
go run ./test/bench/pushlive -bootops bin/bootops -nodes 1000 -sites 10 -pushes 50
echo "## 10,000 nodes, 50 sites, 20 pushes"
go run ./test/bench/pushlive -bootops bin/bootops -nodes 10000 -sites 50 -pushes 20
echo "## 50,000 nodes (50,000 files), 100 sites, 5 pushes"
go run ./test/bench/pushlive -bootops bin/bootops -nodes 50000 -sites 100 -pushes 5 -reference=false
