package compiler

import (
	"path/filepath"
	"testing"
	"testing/fstest"
)

// FuzzLoad feeds arbitrary bytes to the loader as a YAML file and as a CUE
// file beside a valid repository: it must never panic, and every failure
// must be a positioned error in the file it came from (or the files it
// clashes with).
func FuzzLoad(f *testing.F) {
	base := readTxtar(f, "testdata/_base.txtar")
	docs := corpus(f)
	for _, name := range sortedKeys(docs) {
		f.Add(docs[name], false)
	}
	cues, _ := filepath.Glob("testdata/*/repo.txtar")
	for _, p := range cues {
		for _, file := range readTxtar(f, p).files {
			if filepath.Ext(file.Path) == ".cue" {
				f.Add(file.Data, true)
			}
		}
	}
	f.Add([]byte("\x00\x01binary"), false)
	f.Add([]byte("a: &a [*a, *a]\nb: *a\n"), false)
	f.Add([]byte("\t- x"), false)
	c := newCompiler(f)
	f.Fuzz(func(t *testing.T, data []byte, isCUE bool) {
		fsys := fstest.MapFS{}
		for _, file := range base.files {
			fsys[file.Path] = &fstest.MapFile{Data: file.Data}
		}
		name := "sites/s1/nodes/fuzz.yaml"
		if isCUE {
			name = "fuzz.cue"
		}
		fsys[name] = &fstest.MapFile{Data: data}
		_, err := c.Compile(fsys)
		if err == nil {
			return
		}
		list, ok := err.(Errors)
		if !ok {
			t.Fatalf("not an Errors: %T %v", err, err)
		}
		for _, e := range list {
			if e.Pos.File == "" || e.Msg == "" {
				t.Fatalf("error without position or message: %#v", e)
			}
		}
	})
}
