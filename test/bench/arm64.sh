#!/usr/bin/env bash
# ARM64 beside x86_64 (BENCHMARKS.md): TestARM64 with its x86_64 machine
# installing the Debian amd64 image too (tag armbench), so one run times
# power-on → provisioned and power-on → running for both families under
# TCG, side by side from one daemon. Root, QEMU, about 6 min warm (the
# Debian images cached by test/image/cached.sh; the first arm64 one builds
# under qemu-user). Run from the repository's root:
#
#   bash test/bench/arm64.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p test/bench/results
go test -count=1 -tags 'e2e armbench' -timeout 90m -run 'TestARM64$' -v ./test/e2e 2>&1 | tee test/bench/results/arm64.txt
grep -E 'timing:' test/bench/results/arm64.txt
