// Package deb builds bootops's Debian package with nfpm: the static
// binaries, the systemd units, the default settings (conffiles) and the
// maintainer scripts of files/. The same commit, toolchain and mtime give
// the same bytes.
package deb

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

//go:embed files
var assets embed.FS

// Name and Arch are the package's.
const (
	Name = "bootops"
	Arch = "amd64"
	// Maintainer is the project's own address (its commits' author).
	Maintainer = "bootops maintainers <maintainers@users.noreply.a-seed-1a1cad63.example>"
)

// Relations, each for what the code needs:
var (
	// Depends: adduser makes the user bootops in postinst. ipxe: serve with
	// TFTP on (the default --tftp-addr :69, and the shipped serve.yaml)
	// refuses to start without iPXE binaries in --ipxe-dir (/usr/lib/ipxe).
	depends = []string{"adduser", "ipxe"}
	// Recommends: what serve uses when it is there and a site wants it:
	// Debian's signed shim and network GRUB (--shim, --grub: the Secure Boot
	// chain, skipped with a debug line when missing) and ipmitool (bmclib's
	// IPMI driver; Redfish BMCs need nothing).
	recommends = []string{"shim-signed", "grub-efi-amd64-signed", "ipmitool"}
	// Suggests: `bootops microos build` (once, on any machine; its output
	// goes to Git): Debian's kernel, a static busybox, cryptsetup (carried
	// for encrypted installs), and for --uki objcopy, the EFI stub and
	// sbsign.
	suggests = []string{"linux-image-amd64", "busybox-static", "cryptsetup-bin", "nvme-cli", "hdparm", "binutils", "systemd-boot-efi", "sbsigntool"}
)

// Options are one build's inputs.
type Options struct {
	Version string    // the Debian version (see Version)
	Commit  string    // the commit, named in the changelog
	Bootops string    // static bootops binary
	Agent   string    // static bootops-agent binary
	MTime   time.Time // every file's and archive member's time
}

// FileName is the package's file name: bootops_<version>_amd64.deb.
func FileName(version string) string { return fmt.Sprintf("%s_%s_%s.deb", Name, version, Arch) }

var describeRe = regexp.MustCompile(`^v?([0-9][0-9A-Za-z.+~-]*?)(?:-([0-9]+)-g([0-9a-f]+))?$`)

// Version turns `git describe --tags --always` into a Debian version: a
// tag v1.2.3 is 1.2.3 (v1.2.3-rc1 is 1.2.3~rc1, before 1.2.3),
// v1.2.3-4-gabc1234 is 1.2.3+git4.abc1234, and the bare
// commit describe gives while no tag exists (a prefix of commit, the full
// hash) is 0~git<commit time>.<describe>, which sorts by time.
func Version(describe, commit string, commitTime time.Time) (string, error) {
	d := strings.TrimSpace(describe)
	if len(d) >= 4 && strings.HasPrefix(commit, d) {
		return fmt.Sprintf("0~git%s.%s", commitTime.UTC().Format("20060102150405"), d), nil
	}
	if m := describeRe.FindStringSubmatch(d); m != nil {
		tag := strings.ReplaceAll(m[1], "-", "~")
		if m[2] == "" {
			return tag, nil
		}
		return fmt.Sprintf("%s+git%s.%s", tag, m[2], m[3]), nil
	}
	return "", fmt.Errorf("deb: version: cannot make a Debian version of %q (want a tag like v1.2.3, or the commit %s)", describe, commit)
}

// BuildBinaries builds bootops and bootops-agent from the module at root
// into dir, static and reproducible (as `make agent` builds the agent),
// with version built in.
func BuildBinaries(root, dir, version string) (bootops, agent string, err error) {
	bootops, agent = filepath.Join(dir, "bootops"), filepath.Join(dir, "bootops-agent")
	for _, b := range []struct{ out, pkg, ldflags string }{
		{bootops, "./cmd/bootops", "-s -w -buildid= -X main.version=" + version},
		{agent, "./cmd/bootops-agent", "-s -w -buildid="},
	} {
		cmd := exec.Command("go", "build", "-buildvcs=false", "-trimpath", "-ldflags", b.ldflags, "-o", b.out, b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("deb: go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return bootops, agent, nil
}

// Write writes the package to w.
func Write(w io.Writer, o Options) error {
	if o.Version == "" || o.MTime.IsZero() {
		return fmt.Errorf("deb: a version and an mtime are required")
	}
	tmp, err := os.MkdirTemp("", "bootops-deb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	st, err := stage(tmp, o)
	if err != nil {
		return err
	}
	if err := deb.Default.Package(packageInfo(o, st), w); err != nil {
		return fmt.Errorf("deb: %w", err)
	}
	return nil
}

// staged is where stage put the package's files: the assets under src,
// the man page and the changelog compressed.
type staged struct {
	src, manGz, changelogGz string
}

// stage unpacks the package's files into tmp and writes the compressed
// ones beside them.
func stage(tmp string, o Options) (staged, error) {
	if err := os.CopyFS(tmp, assets); err != nil {
		return staged{}, fmt.Errorf("deb: unpack the package's files: %w", err)
	}
	gz := func(name string, data []byte) (string, error) {
		p := filepath.Join(tmp, name)
		return p, os.WriteFile(p, gzip9(data), 0o644)
	}
	man, err := fs.ReadFile(assets, "files/bootops.1")
	if err != nil {
		return staged{}, err
	}
	st := staged{src: filepath.Join(tmp, "files")}
	if st.manGz, err = gz("bootops.1.gz", man); err != nil {
		return staged{}, err
	}
	if st.changelogGz, err = gz("changelog.gz", changelog(o)); err != nil {
		return staged{}, err
	}
	return st, nil
}

// contents is what the package installs, owned by root with o's mtime.
func contents(o Options, st staged) files.Contents {
	fi := func(mode os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: o.MTime}
	}
	file := func(from, to string, mode os.FileMode) *files.Content {
		return &files.Content{Source: from, Destination: to, FileInfo: fi(mode)}
	}
	src, doc := st.src, "/usr/share/doc/"+Name
	return files.Contents{
		// The real binary sits beside the agent: `bootops microos build`
		// looks for bootops-agent next to itself (symlinks resolved).
		file(o.Bootops, "/usr/lib/bootops/bootops", 0o755),
		file(o.Agent, "/usr/lib/bootops/bootops-agent", 0o755),
		{Source: "../lib/bootops/bootops", Destination: "/usr/bin/bootops", Type: files.TypeSymlink, FileInfo: fi(0o777)},
		file(filepath.Join(src, "bootops.service"), "/usr/lib/systemd/system/bootops.service", 0o644),
		file(filepath.Join(src, "bootops-hub.service"), "/usr/lib/systemd/system/bootops-hub.service", 0o644),
		{Source: filepath.Join(src, "serve.yaml"), Destination: "/etc/bootops/serve.yaml", Type: files.TypeConfig, FileInfo: fi(0o644)},
		{Source: filepath.Join(src, "hub.env"), Destination: "/etc/bootops/hub.env", Type: files.TypeConfig, FileInfo: fi(0o644)},
		{Destination: "/etc/bootops/hub-sites", Type: files.TypeDir, FileInfo: fi(0o755)},
		file(filepath.Join(src, "copyright"), doc+"/copyright", 0o644),
		// A native package (no Debian revision): changelog.gz.
		file(st.changelogGz, doc+"/changelog.gz", 0o644),
		file(filepath.Join(src, "lintian-overrides"), "/usr/share/lintian/overrides/"+Name, 0o644),
		file(st.manGz, "/usr/share/man/man1/bootops.1.gz", 0o644),
	}
}

// packageInfo is the package's control data, contents and scripts.
func packageInfo(o Options, st staged) *nfpm.Info {
	return nfpm.WithDefaults(&nfpm.Info{
		Name: Name, Arch: Arch, Platform: "linux",
		Version: o.Version, VersionSchema: "none",
		Section: "admin", Priority: "optional",
		Maintainer: Maintainer,
		Homepage:   "https://github.com/bootops/bootops",
		Description: "provision bare-metal machines from Git\n" +
			"bootops compiles a Git repository of sites, machines and profiles and\n" +
			"serves it: network boot (DHCP, TFTP, HTTP, HTTPS) into a Micro-OS\n" +
			"whose agent installs the machine, a status API and a dashboard\n" +
			"(bootops.service), and a hub that gathers many sites' events\n" +
			"(bootops-hub.service).",
		MTime: o.MTime,
		Overridables: nfpm.Overridables{
			Depends: depends, Recommends: recommends, Suggests: suggests,
			Contents: contents(o, st),
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(st.src, "postinst"),
				PreRemove:   filepath.Join(st.src, "prerm"),
				PostRemove:  filepath.Join(st.src, "postrm"),
			},
			Deb: nfpm.Deb{Compression: "xz"},
		},
	})
}

// changelog is the Debian changelog of this one build.
func changelog(o Options) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s (%s) unstable; urgency=medium\n\n", Name, o.Version)
	if o.Commit != "" {
		fmt.Fprintf(&b, "  * Built from commit %s.\n", o.Commit)
	} else {
		fmt.Fprintf(&b, "  * Built from the bootops source.\n")
	}
	fmt.Fprintf(&b, "\n -- %s  %s\n", Maintainer, o.MTime.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	return b.Bytes()
}

// gzip9 compresses at the best level with no name and no time, as Debian
// wants documentation compressed (and reproducibly).
func gzip9(data []byte) []byte {
	var b bytes.Buffer
	w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	w.Write(data)
	w.Close()
	return b.Bytes()
}
