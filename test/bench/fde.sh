#!/usr/bin/env bash
# Full-disk encryption's cost (BENCHMARKS.md, "Full-disk encryption"):
# TestEncryptedInstall with vm-plain beside vm-fde (tag fdebench), the same
# Debian image in the clear and encrypted, installed and first booted at
# once; their times side by side. Needs root, QEMU and the lab's packages
# (make lab-deps); about 30 minutes on 2 cores under TCG.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
  echo "fde.sh: run as root (network namespaces, VMs)" >&2
  exit 1
fi
mkdir -p test/bench/results
go test -count=1 -tags 'e2e fdebench' -timeout 90m -run 'TestEncryptedInstall$' -v ./test/e2e 2>&1 | tee test/bench/results/fde.txt
grep 'timing:' test/bench/results/fde.txt
