//go:build e2e && !armbench

package e2e

// x86Running is test/bench/arm64.sh's (tag armbench): in make test the
// x86_64 machine beside the arm64 one installs the small test image and
// is not booted again.
const x86Running = false
