// Command mkdeb builds bootops's Debian package (make package):
//
//	go run ./packaging/cmd/mkdeb -o out
//
// It builds the static binaries of the module it runs in, then
// out/bootops_<version>_amd64.deb. The version is -version, else made of
// `git describe --tags --always`; every file's time is SOURCE_DATE_EPOCH,
// else the commit's time, so the same commit gives the same bytes.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bootops/bootops/packaging/deb"
)

func main() {
	out := flag.String("o", "out", "folder to write the package to")
	version := flag.String("version", "", "Debian version (default: from git describe --tags --always)")
	flag.Parse()
	if err := run(*out, *version); err != nil {
		fmt.Fprintf(os.Stderr, "mkdeb: %v\n", err)
		os.Exit(1)
	}
}

func run(out, version string) error {
	root, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		return err
	}
	mtime, err := sourceDate()
	if err != nil {
		return err
	}
	if version == "" {
		d, err := git("describe", "--tags", "--always")
		if err != nil {
			return err
		}
		if version, err = deb.Version(d, commit, mtime); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "mkdeb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bootops, agent, err := deb.BuildBinaries(root, tmp, version)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := deb.Write(&b, deb.Options{Version: version, Commit: commit, Bootops: bootops, Agent: agent, MTime: mtime}); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(out, deb.FileName(version))
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

// sourceDate is SOURCE_DATE_EPOCH, else the time of the commit.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = git("log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, err
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func git(args ...string) (string, error) {
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
