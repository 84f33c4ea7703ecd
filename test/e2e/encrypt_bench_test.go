//go:build e2e && fdebench

package e2e

// fdeCompare: TestEncryptedInstall installs vm-plain, the same image in
// the clear, beside vm-fde, and times both (test/bench/fde.sh).
const fdeCompare = true
