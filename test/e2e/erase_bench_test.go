//go:build e2e && erasebench

package e2e

// eraseBench: TestRetire's erased disks are 2 GiB each, and after the
// agent's erase the host zeroes each disk image with dd and with
// blkdiscard -z on a loop device, the same sizes, timed beside it
// (test/bench/erase.sh).
const eraseBench = true
