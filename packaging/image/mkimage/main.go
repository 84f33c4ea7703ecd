// Command mkimage writes bootops' container image to a folder (make image):
// a static bootops and agent, the iPXE, shim and GRUB binaries from
// Debian's packages on this machine, the CA certificates, and a non-root
// user, with no shell and no package manager. Every timestamp is
// -epoch ($SOURCE_DATE_EPOCH, the commit's time in make image), so the
// same inputs give the same digest; it prints the digest.
//
//	mkimage -bootops bin/image/bootops -agent bin/image/bootops-agent -o out/image \
//	        -version v0.1.0 -revision $(git rev-parse HEAD)
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/bootops/bootops/boot/tftp"
	"github.com/bootops/bootops/packaging/image"
)

// The image's user, as distroless's "nonroot".
const nonroot = 65532

// Where the image keeps what it serves and its state.
const (
	stateDir  = "/var/lib/bootops"
	sourceDir = "/srv/bootops"
	config    = "/etc/bootops/serve.yaml"
)

type options struct {
	bootops, agent, out, version, revision, source, ref string
	ipxeDir, shim, grub, caFile                         string
	epoch                                               int64
}

func main() {
	var o options
	flag.StringVar(&o.bootops, "bootops", "", "static bootops binary (required)")
	flag.StringVar(&o.agent, "agent", "", "static bootops-agent binary (required)")
	flag.StringVar(&o.out, "o", "out/image", "folder to write the OCI layout (oci/) and the docker archive (bootops.tar) to")
	flag.StringVar(&o.version, "version", "dev", "image version: its tag and org.opencontainers.image.version")
	flag.StringVar(&o.revision, "revision", "", "source commit: org.opencontainers.image.revision")
	flag.StringVar(&o.source, "source", "https://github.com/bootops/bootops", "org.opencontainers.image.source")
	flag.StringVar(&o.ref, "name", "bootops", "image name (the tag is -version)")
	flag.StringVar(&o.ipxeDir, "ipxe-dir", "/usr/lib/ipxe", "Debian's iPXE binaries (package ipxe)")
	flag.StringVar(&o.shim, "shim", "/usr/lib/shim/shimx64.efi.signed", "Debian's signed shim (package shim-signed)")
	flag.StringVar(&o.grub, "grub", "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed", "Debian's signed network GRUB (package grub-efi-amd64-signed)")
	flag.StringVar(&o.caFile, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle (package ca-certificates)")
	flag.Int64Var(&o.epoch, "epoch", envEpoch(), "every timestamp in the image, seconds since 1970 (default $SOURCE_DATE_EPOCH)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func envEpoch() int64 {
	n, _ := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	return n
}

func run(o options) error {
	if o.bootops == "" || o.agent == "" {
		return errors.New("-bootops and -agent are required")
	}
	if o.epoch <= 0 {
		return errors.New("-epoch (or $SOURCE_DATE_EPOCH) is required: the image's timestamps must not be the build's")
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	img, err := image.Build(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	ref := o.ref + ":" + o.version
	if err := image.Write(img, o.out, ref); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "digest"), []byte(d.String()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s %s (%s/oci, %s/bootops.tar)\n", ref, d, o.out, o.out)
	return nil
}

// config is the image: its three layers (the base files, Debian's boot
// binaries, bootops) and how it runs.
func (o options) config() (image.Config, error) {
	var r reader
	base := []image.File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n")},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: r.read(o.caFile)},
		{Path: config, Mode: 0o644, Data: []byte(serveYAML)},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: nonroot, GID: nonroot},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: stateDir, Dir: true, Mode: 0o700, UID: nonroot, GID: nonroot},
		{Path: sourceDir, Dir: true, Mode: 0o755},
	}
	var boot []image.File
	for _, n := range tftp.Names {
		p := filepath.Join(o.ipxeDir, n)
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) && n != "ipxe.efi" && n != "undionly.kpxe" {
			continue // the two the DHCP server hands out must be there; the others when Debian ships them
		}
		// Read, not linked: Debian's ipxe.efi is a link to /boot.
		boot = append(boot, image.File{Path: "/usr/lib/ipxe/" + n, Mode: 0o644, Data: r.read(p)})
	}
	boot = append(boot,
		image.File{Path: "/usr/lib/shim/shimx64.efi.signed", Mode: 0o644, Data: r.read(o.shim)},
		image.File{Path: "/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed", Mode: 0o644, Data: r.read(o.grub)})
	for _, pkg := range []string{"ipxe", "shim-signed", "grub-efi-amd64-signed", "ca-certificates"} {
		p := "/usr/share/doc/" + pkg + "/copyright"
		boot = append(boot, image.File{Path: p, Mode: 0o644, Data: r.read(p)})
	}
	app := []image.File{
		{Path: "/usr/bin/bootops", Mode: 0o755, Data: r.read(o.bootops)},
		{Path: "/usr/lib/bootops/bootops-agent", Mode: 0o755, Data: r.read(o.agent)},
	}
	if r.err != nil {
		return image.Config{}, r.err
	}
	return image.Config{
		Layers: []image.Layer{
			{Comment: "users, CA certificates, folders, serve.yaml", Files: base},
			{Comment: "iPXE, shim and GRUB from Debian's ipxe, shim-signed, grub-efi-amd64-signed", Files: boot},
			{Comment: "bootops " + o.version, Files: app},
		},
		Created:    time.Unix(o.epoch, 0),
		User:       strconv.Itoa(nonroot) + ":" + strconv.Itoa(nonroot),
		WorkingDir: stateDir,
		Entrypoint: []string{"/usr/bin/bootops"},
		Cmd:        []string{"serve", "--config", config},
		Env:        []string{"PATH=/usr/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Ports:      []string{"67/udp", "69/udp", "4011/udp", "8080/tcp"},
		Volumes:    []string{stateDir},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "bootops",
			"org.opencontainers.image.description": "Provisions bare-metal machines from Git: DHCP, TFTP and HTTP network boot",
			"org.opencontainers.image.source":      o.source,
			"org.opencontainers.image.revision":    o.revision,
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.created":     time.Unix(o.epoch, 0).UTC().Format(time.RFC3339),
		},
	}, nil
}

// serveYAML is the image's /etc/bootops/serve.yaml: flags and BOOTOPS_*
// variables win over it (BOOTOPS_SOURCE=https://… for a Git remote).
const serveYAML = `# bootops serve in the container image (docs/container.md). Flags and
# BOOTOPS_<FLAG> variables win over these settings.
source: ` + sourceDir + `
state-dir: ` + stateDir + `
ipxe-dir: /usr/lib/ipxe
log-format: json
`

// reader reads files, keeping the first error, so the image's list of
// files reads as one list.
type reader struct{ err error }

func (r *reader) read(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%w (make image installs Debian's ipxe, shim-signed, grub-efi-amd64-signed and ca-certificates)", err)
	}
	return b
}
