package media

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"
)

// fatImage writes a FAT file system image of size bytes holding files,
// with mtools. Every date is epoch (mtools dates what it writes
// SOURCE_DATE_EPOCH) and the volume serial is given: equal inputs, equal bytes.
func fatImage(out string, size int64, files tree, serial uint32, epoch time.Time) error {
	if err := os.WriteFile(out, nil, 0o644); err != nil {
		return err
	}
	if err := os.Truncate(out, size); err != nil {
		return err
	}
	env := append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", epoch.Unix()), "MTOOLS_SKIP_CHECK=1")
	mt := func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("media: %s %s: %v: %s", name, strings.Join(args, " "), err, b)
		}
		return nil
	}
	sectors := size / 512
	if err := mt("mformat", "-i", out, "-T", fmt.Sprint(sectors), "-h", "64", "-s", "32", "-v", "BOOTOPS", "-N", fmt.Sprintf("%08x", serial), "::"); err != nil {
		return err
	}
	dirs := map[string]bool{}
	var names []string
	for p := range files {
		names = append(names, p)
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds) // parents first
	for _, d := range ds {
		if err := mt("mmd", "-i", out, "::/"+d); err != nil {
			return err
		}
	}
	sort.Strings(names)
	for _, p := range names {
		if err := mt("mcopy", "-i", out, files[p], "::/"+p); err != nil {
			return err
		}
	}
	return nil
}

// treeSize is the bytes files take.
func treeSize(files tree) (int64, error) {
	var n int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return 0, fmt.Errorf("media: %w", err)
		}
		n += st.Size()
	}
	return n, nil
}
