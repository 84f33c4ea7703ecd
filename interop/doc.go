// Package interop moves bootops' data to and from other systems' formats:
// it exports a compiled Plan's site as Tinkerbell Hardware, Template and
// Workflow objects (ExportTinkerbell), and imports an EIM bulk-import CSV
// (CSVImport) and EIM OS profiles (ImportEIMProfile) as repository files.
// The compiler compiles; this package consumes what it compiled, or writes
// what it will compile.
package interop
