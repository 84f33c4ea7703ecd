#!/usr/bin/env bash
# A retirement's erase (BENCHMARKS.md, "Retirement: erase"): TestRetire
# with 2 GiB disks (tag erasebench) on one VM, an NVMe disk, a SATA disk
# behind AHCI and a virtio disk erased by the agent, each method's time
# from the signed certificate; beside them, the host zeroing the same
# images with dd and with blkdiscard -z. Needs root, QEMU and the lab's
# packages (make lab-deps); a few minutes on 2 cores under TCG.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
  echo "erase.sh: run as root (network namespaces, VMs, loop devices)" >&2
  exit 1
fi
mkdir -p test/bench/results
go test -count=1 -tags 'e2e erasebench' -timeout 60m -run 'TestRetire$' -v ./test/e2e 2>&1 | tee test/bench/results/erase.txt
grep -E 'erase: |timing: ' test/bench/results/erase.txt
