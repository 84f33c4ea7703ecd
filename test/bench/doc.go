// Package bench holds the benchmarks whose figures BENCHMARKS.md records,
// beside the scripts that compare bootops with reference tools.
package bench
