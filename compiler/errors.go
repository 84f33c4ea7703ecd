package compiler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Pos is a position in a repository file. Line and Col count from 1; 0 means
// unknown.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Error is one positioned problem: "file:line:col: field.path: message".
type Error struct {
	Pos  Pos
	Path string // field path inside the object, "" for file-level errors
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Path + ": " + e.Msg
}

// Errors is every problem of a compilation, sorted by file, line, column.
type Errors []*Error

func (l Errors) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func (l Errors) sort() Errors {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	return slices.CompactFunc(l, func(a, b *Error) bool { return a.Error() == b.Error() })
}

func errorf(pos Pos, path, format string, args ...any) *Error {
	return &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)}
}
