package media

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootops/bootops/microos"
	"github.com/bootops/bootops/plan"
	"github.com/bootops/bootops/trust"
)

// Spec is what a medium holds.
type Spec struct {
	Site *plan.Site
	// Node is the node the medium is for: nil for the site's generic one
	// (the machine is found at check-in by what it reports).
	Node    *plan.Node
	MicroOS *plan.MicroOS
	// Kernel and Initrd are the Micro-OS's files on this machine, already
	// checked against MicroOS's digests.
	Kernel, Initrd string
	// CA is the site CA (PEM) the agent pins.
	CA string
	// Epoch is every file's date (the commit's time).
	Epoch time.Time
}

// DefaultEpoch is a medium's date when none is given: a constant, so the
// CLI and the daemon make the same bytes of the same inputs.
var DefaultEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// NetworkPath is where a medium puts a node's static network for /init.
const NetworkPath = "/etc/bootops/network"

// Server is the https URL the site's machines reach the server at: the
// site's remote url, else its own https address.
func Server(s *plan.Site) (string, error) {
	switch {
	case s.Remote != nil && s.Remote.URL != "":
		return s.Remote.URL, nil
	case s.Network.HTTPSPort != 0 && s.Network.ServerAddress != "":
		return "https://" + plan.HostPort(s.Network.ServerAddress, s.Network.HTTPSPort), nil
	}
	return "", fmt.Errorf("site %s has no https URL for its machines: boot media talk to the server over TLS only (set network.httpsPort, and remote.url when they reach it through NAT or a name)", s.Name)
}

// MicroOSFor is the Micro-OS a medium of site (or of node, when given)
// boots: the node's profile's, else the site's default profile's, else
// the one named default; nil when there is none.
func MicroOSFor(p *plan.Plan, s *plan.Site, n *plan.Node) *plan.MicroOS {
	profile := s.DefaultProfile
	if n != nil {
		profile = n.Profile
	}
	name := "default"
	if pr := p.Profile(profile); pr != nil {
		name = pr.MicroOS
	}
	return p.MicroOSNamed(name)
}

// check says what is missing from sp.
func (sp Spec) check() error {
	switch {
	case sp.Site == nil || sp.MicroOS == nil:
		return errors.New("media: no site or Micro-OS")
	case sp.Node != nil && sp.Node.Site != sp.Site.Name:
		return fmt.Errorf("media: node %s is not on site %s", sp.Node.Name, sp.Site.Name)
	case strings.TrimSpace(sp.CA) == "":
		return errors.New("media: no site CA: the agent must pin the server's certificate (give the site CA's certificate, e.g. the daemon's tls/ca.pem)")
	}
	if _, err := trust.PoolFromPEM(sp.CA); err != nil {
		return fmt.Errorf("media: site CA: %w", err)
	}
	_, err := Server(sp.Site)
	return err
}

// Settings is the medium's second initrd: the agent's settings (chain
// says how the machine booted: plan.ChainMedia, or plan.ChainUKI for the
// HTTPS boot URL) and the node's static network.
func (sp Spec) Settings(chain string) ([]byte, error) {
	if err := sp.check(); err != nil {
		return nil, err
	}
	server, _ := Server(sp.Site)
	cfg, err := json.MarshalIndent(trust.Config{Server: server, Site: sp.Site.Name, CA: sp.CA, Chain: chain}, "", "  ")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{strings.TrimPrefix(trust.ConfigPath, "/"): append(cfg, '\n')}
	if sp.Node != nil && sp.Node.Network != nil {
		files[strings.TrimPrefix(NetworkPath, "/")] = networkEnv(sp.Node)
	}
	return microos.Overlay(files), nil
}

// networkEnv is a node's static network as /init reads it (shell
// assignments; every value is an address, a number or a MAC, checked by
// the compiler, quoted all the same).
func networkEnv(n *plan.Node) []byte {
	nn := n.Network
	mac := nn.Interface
	if mac == "" && len(n.Identity.MACs) > 0 {
		mac = n.Identity.MACs[0]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# node %s's static network, from Git\n", n.Name)
	set := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "BOOTOPS_NET_%s='%s'\n", k, strings.ReplaceAll(v, "'", ""))
		}
	}
	set("ADDRESS", nn.Address)
	set("GATEWAY", nn.Gateway)
	set("DNS", strings.Join(nn.DNS, " "))
	if nn.VLAN != 0 {
		set("VLAN", fmt.Sprint(nn.VLAN))
	}
	set("MAC", mac)
	return []byte(b.String())
}

// cmdline is the Micro-OS's kernel command line on a medium.
func (sp Spec) cmdline() string {
	return strings.TrimSpace(sp.MicroOS.Cmdline)
}

// what names the medium for people: "site s1" or "node n1 of site s1".
func (sp Spec) what() string {
	if sp.Node != nil {
		return "node " + sp.Node.Name + " of site " + sp.Site.Name
	}
	return "site " + sp.Site.Name
}

// tree is the files of a medium by their path on it.
type tree map[string]string // path on the medium → file on this machine

// id is the medium's marker: a digest of its contents, which GRUB searches
// for to find the medium it came from.
func id(settings []byte, sp Spec) (string, error) {
	h := sha256.New()
	for _, f := range []string{sp.Kernel, sp.Initrd} {
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	h.Write(settings)
	io.WriteString(h, sp.cmdline())
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func hashFile(w io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("media: %w", err)
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// stage writes the medium's own files (settings, boot configs, marker)
// into dir and returns the whole tree: those and the Micro-OS's and boot
// loaders' files where they are.
func (sp Spec) stage(dir string, settings []byte) (tree, string, error) {
	mid, err := id(settings, sp)
	if err != nil {
		return nil, "", err
	}
	own := map[string][]byte{
		"bootops/media.img":      settings,
		"bootops/id-" + mid:      []byte(sp.what() + "\n"),
		"EFI/BOOT/grub.cfg":      grubConfig(sp, mid),
		"EFI/debian/grub.cfg":    grubConfig(sp, mid),
		"isolinux/isolinux.cfg":  isolinuxConfig(sp),
		"boot/grub/grub.cfg":     grubConfig(sp, mid),
		".disk/info":             []byte("bootops boot medium for " + sp.what() + "\n"),
		"bootops/README.txt":     []byte(readme(sp)),
		"bootops/credential.txt": []byte(credentialHelp),
	}
	t := tree{"bootops/vmlinuz": sp.Kernel, "bootops/initrd": sp.Initrd}
	for p, b := range own {
		f := filepath.Join(dir, "own", p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return nil, "", err
		}
		t[p] = f
	}
	return t, mid, nil
}

// credentialHelp explains, on the medium, how a credential is added.
const credentialHelp = `A machine that boots this medium over the Internet proves who it is with its
TPM (identity.tpm in Git) or a media credential: single-use, expiring, for
one node. This file is not one. To add one to a copy of a USB image:

  bootops media credential NODE --into stick.img

It writes bootops/credential.cfg into the stick's EFI partition; GRUB
hands it to the Micro-OS on the kernel command line.
`

func readme(sp Spec) string {
	server, _ := Server(sp.Site)
	return fmt.Sprintf("bootops boot medium for %s\nserver: %s\nMicro-OS: %s\n", sp.what(), server, sp.MicroOS.Name)
}

// grubConfig boots the Micro-OS from the medium GRUB finds by its marker,
// with a media credential when one was added beside it.
func grubConfig(sp Spec, mid string) []byte {
	return []byte(fmt.Sprintf(`# bootops boot medium for %[1]s
set timeout=0
search --no-floppy --file --set=root /bootops/id-%[2]s
set bootops_credential=
if [ -f ($root)/bootops/credential.cfg ]; then
	source ($root)/bootops/credential.cfg
fi
echo "bootops: starting the Micro-OS of %[1]s"
linux ($root)/bootops/vmlinuz %[3]s $bootops_credential
initrd ($root)/bootops/initrd ($root)/bootops/media.img
boot
`, sp.what(), mid, sp.cmdline()))
}

// isolinuxConfig boots the Micro-OS on BIOS machines from the ISO.
func isolinuxConfig(sp Spec) []byte {
	return []byte(fmt.Sprintf("# bootops boot medium for %s\nDEFAULT bootops\nPROMPT 0\nTIMEOUT 0\nLABEL bootops\n  KERNEL /bootops/vmlinuz\n  INITRD /bootops/initrd,/bootops/media.img\n  APPEND %s\n",
		sp.what(), sp.cmdline()))
}

// scratch readies a medium's build: a folder beside out (removed by done)
// holding sp's settings (for chain) and its own files, staged with the
// Micro-OS's (stage).
func (sp Spec) scratch(out, chain string) (b build, done func(), err error) {
	if b.settings, err = sp.Settings(chain); err != nil {
		return b, nil, err
	}
	if b.dir, err = os.MkdirTemp(filepath.Dir(out), ".media-*"); err != nil {
		return b, nil, fmt.Errorf("media: %w", err)
	}
	done = func() { os.RemoveAll(b.dir) }
	if b.all, b.mid, err = sp.stage(b.dir, b.settings); err != nil {
		done()
		return b, nil, err
	}
	return b, done, nil
}

// build is a medium being built: its scratch folder, settings, staged
// tree and marker.
type build struct {
	dir      string
	settings []byte
	all      tree
	mid      string
}
