package http

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/plan"
)

// The shim chain. Debian's signed GRUB (grubnetx64, loaded by shim) reads
// only /grub/grub.cfg, over TFTP, and can load no http module under
// Secure Boot; so everything after shim comes over TFTP: the dispatcher
// config, which reads the machine's SMBIOS serial and UUID and asks again
// with them and its MAC (GRUBMachinePath?…), then the kernel and initrd.

// GRUBConfigPath is the one config file Debian's signed GRUB asks for.
const GRUBConfigPath = "grub/grub.cfg"

// GRUBMachinePath is the per-machine config the dispatcher asks for, its
// identity in a query as on the iPXE request.
const GRUBMachinePath = "grub/machine"

// grubDispatcher is grub.cfg: who am I, then my own config.
const grubDispatcher = `# bootops: tell the boot server who this machine is
set timeout=0
smbios --type 1 --get-string 7 --set bootops_serial
smbios --type 1 --get-uuid 8 --set bootops_uuid
echo "bootops: mac ${net_default_mac} serial ${bootops_serial} uuid ${bootops_uuid}"
configfile "(tftp)/` + GRUBMachinePath + `?mac=${net_default_mac}&serial=${bootops_serial}&uuid=${bootops_uuid}"
echo "bootops: the boot server gave no config for this machine"
sleep 10
`

// grubLocal boots the machine's disk from GRUB: it chainloads the disk's
// loader at the removable path for GRUB's CPU (\EFI\BOOT\BOOTAA64.EFI,
// BOOTX64.EFI: shim in the images bootops installs, checked under Secure
// Boot against the firmware's db through shim's protocol) with root set to
// that disk (GRUB gives the loaded image root's device, not the path's: a
// shim started with the network's looked for its GRUB there), and hands back
// to the firmware only when no disk has one. Not exit first: Debian's GRUB
// (2.06) exits with EFI_SUCCESS, and EDK2's boot manager (OVMF, AAVMF and
// the firmware built on it) takes a boot option that returned success as
// done and opens its menu instead of the next option, the disk (measured:
// TestARM64).
const grubLocal = `if [ "$grub_cpu" = arm64 ]; then set bootops_loader=/EFI/BOOT/BOOTAA64.EFI; else set bootops_loader=/EFI/BOOT/BOOTX64.EFI; fi
search --no-floppy --file --set=bootops_disk "$bootops_loader"
if [ -n "$bootops_disk" ]; then
  echo "bootops: starting ($bootops_disk)$bootops_loader"
  set root="$bootops_disk"
  chainloader "$bootops_loader"
  boot
fi
echo "bootops: no disk has $bootops_loader: back to the firmware's next boot option"
exit
`

var grubFlavor = flavor{
	name:  "GRUB",
	of:    func(a *plan.Artifacts) string { return a.GRUB },
	local: func(why string) string { return "echo " + grubQuote("bootops: "+why) + "\n" + grubLocal },
	refuse: func(why string) string {
		return grubStop("REFUSED, this machine does not match its registration: " + why)
	},
	notHere: func(why string) string {
		return grubStop(why)
	},
}

// grubStop prints why and stays there: never a wrong OS, never a wipe.
func grubStop(why string) string {
	return "echo " + grubQuote("bootops: "+why) + "\necho 'bootops: fix it in Git (bootops explain shows the decision); waiting'\nsleep 3600\nhalt\n"
}

// grubQuote single-quotes s for GRUB: nothing inside is expanded.
func grubQuote(s string) string {
	s = strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// TFTPFile serves what TFTP gives beyond the static binaries: GRUB's
// dispatcher and per-machine config, and the files a per-machine config
// loads (the Micro-OS's kernel and initrd, the site overlay). peer is the
// client's address.
func (s *Server) TFTPFile(name, peer string) ([]byte, bool) {
	name = strings.TrimPrefix(name, "/")
	switch {
	case name == GRUBConfigPath:
		return []byte(grubDispatcher), true
	case strings.HasPrefix(name, GRUBMachinePath+"?"):
		q, err := url.ParseQuery(strings.TrimPrefix(name, GRUBMachinePath+"?"))
		if err != nil {
			return nil, false
		}
		body, _ := s.decideScript(q, peer, grubFlavor)
		return []byte(body), true
	case strings.HasPrefix(name, "artifacts/microos/"):
		parts := strings.Split(strings.TrimPrefix(name, "artifacts/microos/"), "/")
		if len(parts) != 2 || (parts[1] != "kernel" && parts[1] != "initrd") {
			return nil, false
		}
		return s.artifactBytes(parts[0], parts[1])
	case strings.HasPrefix(name, "artifacts/overlay/"):
		b, err := s.overlay(strings.TrimPrefix(name, "artifacts/overlay/"))
		if err != nil {
			s.logger().Warn("overlay", "err", err)
			return nil, false
		}
		return b, true
	}
	return nil, false
}

// artifactBytes reads a Micro-OS file whole (TFTP serves from memory).
func (s *Server) artifactBytes(name, file string) ([]byte, bool) {
	p := s.Plans.Current()
	if p == nil || s.Files.Artifacts == nil {
		return nil, false
	}
	m := p.MicroOSNamed(name)
	if m == nil {
		return nil, false
	}
	a := m.Kernel
	if file == "initrd" {
		a = m.Initrd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, _, err := s.Files.Artifacts.open(ctx, a)
	if err != nil {
		s.Events.Record(status.Event{Kind: status.KindFile, Message: fmt.Sprintf("micro-os %s %s: %v", name, file, err), Error: true})
		return nil, false
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return b, err == nil
}

// overlay is the signed site overlay of site, as built when the Plan was
// swapped in (Files.Overlay).
func (s *Server) overlay(site string) ([]byte, error) {
	if s.Files.Overlay == nil {
		return nil, fmt.Errorf("no overlays are served here")
	}
	return s.Files.Overlay(site)
}

func (s *Server) overlayHandler(w http.ResponseWriter, r *http.Request) {
	b, err := s.overlay(r.PathValue("site"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}
