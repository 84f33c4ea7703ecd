// Package plan holds the compiled Plan: the one contract between build time
// (the compiler) and run time (the boot plane, the reconciler, the agent).
//
// A Plan is immutable once built, deterministic (sorted, content-hashed) and
// free of CUE and I/O, so the boot servers can import it without pulling in
// the compiler. Decide is the identity → decision function that both
// `bootops explain` and the HTTP boot server call.
package plan
