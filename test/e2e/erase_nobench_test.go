//go:build e2e && !erasebench

package e2e

// eraseBench: see erase_bench_test.go.
const eraseBench = false
