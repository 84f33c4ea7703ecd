package media

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/bootops/bootops/microos"
	"github.com/bootops/bootops/plan"
)

// UKI writes, for the firmware's HTTPS boot URL, one unified kernel image
// of sp's Micro-OS: its kernel, its initrd with the medium's settings
// appended (a second cpio archive, which the kernel unpacks over the
// first) and its command line. It is not signed: with Secure Boot on, the
// firmware needs it signed by a key in its db (bootops microos build --uki
// --sign-key), or boots the ISO's shim chain instead.
func UKI(sp Spec, out string) error {
	if err := need(nil, "objcopy"); err != nil {
		return err
	}
	b, done, err := sp.scratch(out, plan.ChainUKI)
	if err != nil {
		return err
	}
	defer done()
	dir, settings := b.dir, b.settings
	initrd := filepath.Join(dir, "initrd")
	if err := concat(initrd, sp.Initrd, settings); err != nil {
		return err
	}
	return microos.BuildUKI(sp.Kernel, initrd, microos.UKIOptions{Cmdline: sp.cmdline()}, out)
}

// concat writes first's bytes and then more into out.
func concat(out, first string, more []byte) error {
	src, err := os.Open(first)
	if err != nil {
		return fmt.Errorf("media: %w", err)
	}
	defer src.Close()
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("media: %w", err)
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return fmt.Errorf("media: %w", err)
	}
	// The kernel finds a cpio archive at a 4-byte boundary.
	if pad := (4 - mustSize(f)%4) % 4; pad != 0 {
		f.Write(make([]byte, pad))
	}
	if _, err := f.Write(more); err != nil {
		f.Close()
		return fmt.Errorf("media: %w", err)
	}
	return f.Close()
}

func mustSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}
