// Package archtest holds no code: its test checks that the packages import
// each other only the way docs/architecture.md draws them (its "Arrows"
// section), so the house keeps its rooms as it grows.
package archtest
