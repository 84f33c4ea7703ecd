//go:build e2e && !fdebench

package e2e

// fdeCompare is test/bench/fde.sh's (tag fdebench): make test installs the
// encrypted machine alone.
const fdeCompare = false
