// Package compiler turns a repository (an fs.FS of YAML and CUE files) into
// a plan.Plan: load → validate against the CUE schema → check the rules that
// span objects → render every node's artifacts.
//
// It is pure: no network, no clock, no globals. A Compiler keeps a cache
// keyed by file content, so recompiling after a one-file change only parses
// and validates that file again.
package compiler
