package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Two files: 1 with a break, 0 without; a revision without the document
// is nothing to compare.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	old, cur := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	doc := func(paths string) string {
		return `{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {` + paths + `}}`
	}
	os.WriteFile(old, []byte(doc(`"/a": {"get": {"responses": {"200": {"description": "ok"}}}}`)), 0o644)
	os.WriteFile(cur, []byte(doc(``)), 0o644)
	if code, err := run("", []string{old, cur}); code != 1 || err != nil {
		t.Errorf("a removed path: %d %v, want 1", code, err)
	}
	if code, err := run("", []string{cur, old}); code != 0 || err != nil {
		t.Errorf("an added path: %d %v, want 0", code, err)
	}
	if _, err := run("", []string{old}); err == nil {
		t.Error("one file and no -base: no usage error")
	}
}
