//go:build e2e && armbench

package e2e

// x86Running: TestARM64's x86_64 machine installs the Debian amd64 image
// and runs it too, as the arm64 one does, so power-on to running is timed
// for both families in one run (test/bench/arm64.sh).
const x86Running = true
