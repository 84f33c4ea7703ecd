//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/test/bench/wan/wanem"
	"github.com/bootops/bootops/test/ovmfvars"
)

// Edge nodes over the Internet (docs/edge.md): a store LAN whose router
// hands out addresses only and NATs, a WAN link of 50 ms each way, 1 %
// loss and 20 Mbit/s, and the server behind it; nothing answers a network
// boot in the store. One lab, its machines at once:
//
//   - vm-usb: OVMF, only its USB stick (bootops media usb, its node's media
//     credential written beside it with bootops media credential): shim
//     and GRUB start the Micro-OS, which takes an address from the router,
//     checks in across the WAN over TLS with the credential and installs
//     Debian; the link is cut for 20 s during the image's download, which
//     resumes and is verified. With the stick pulled it boots Debian from
//     its disk, whose report crosses the WAN: running. Booted again from
//     the same stick, it is refused: the credential was spent.
//   - vm-static: the same with Secure Boot on (Microsoft's keys), on a
//     subnet where nothing answers DHCP: its address, gateway and DNS come
//     from Git (node network:) on its stick; its Debian runs with Secure
//     Boot on, on the same network.
//   - vm-url, last: OVMF told only an HTTPS boot URL (the server's UKI of
//     the node, GET /media/lab/nodes/vm-url/boot.efi) and the site CA, as
//     an operator sets them in its setup; it proves itself with its TPM.
//   - vm-iso: SeaBIOS booting the site's generic ISO, fetched from the
//     server as a BMC's virtual media would (GET /media/lab/media.iso);
//     its TPM proves it; it installs Debian and, the ISO pulled, runs it.
//   - vm-held: the same ISO on a registered node that shows only its MAC,
//     and vm-unknown, a machine Git does not know: both held, given
//     nothing.
func TestEdgeOverTheInternet(t *testing.T) {
	t.Parallel()
	start := time.Now()
	w := newWANLab(t, wanShape, true)
	state := filepath.Join(w.dir, "state")
	run(t, bootops, "ca", "init", "--host", wanServer, "--state-dir", state)
	ca := filepath.Join(state, "tls/ca.pem")

	// A large image (64 MiB of noise past its partition): its download
	// takes long enough across the WAN for a cut in the middle of it.
	imgDir := t.TempDir()
	gzSHA, b := buildImage(t, imgDir, "test.raw", imageSize+64<<20, "start=2048, size=65536, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n",
		func(b []byte) { rand.Read(b[imageSize-1<<20 : len(b)-1<<20]) })
	rawSHA := outsidePartition(b)
	w.start("images", "ip", "netns", "exec", w.srv, imageServer, "-dir", imgDir, "-addr", wanServer+":8081")

	debDir, debSHA := debianImage(t)
	w.vms(3)
	w.start("debian", "ip", "netns", "exec", w.srv, imageServer, "-dir", debDir, "-addr", wanServer+":8082")
	urlTPM, isoTPM := w.tpm("url"), w.tpm("iso")
	repo := filepath.Join(t.TempDir(), "repo")
	run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", filepath.Join(repo, "microos"))
	writeRepo(t, repo, vars{"ImageSHA": gzSHA, "DebianSHA": debSHA, "URLEK": urlTPM.EKHash, "ISOEK": isoTPM.EKHash}, "edge")
	token := filepath.Join(w.dir, "ui-token")
	os.WriteFile(token, []byte("edge-operator-token\n"), 0o600)
	w.serve(repo, "--https-addr", wanServer+":8443", "--ui-token-file", token)

	// The sticks, from the repository; each node's credential beside its
	// medium's files. Built twice, a stick is the same bytes.
	usb, static := filepath.Join(w.dir, "vm-usb.img"), filepath.Join(w.dir, "vm-static.img")
	for _, m := range [][2]string{{"vm-usb", usb}, {"vm-static", static}} {
		run(t, bootops, "media", "usb", repo, "--site", "lab", "--node", m[0], "--ca", ca, "-o", m[1])
	}
	again := filepath.Join(w.dir, "again.img")
	run(t, bootops, "media", "usb", repo, "--site", "lab", "--node", "vm-usb", "--ca", ca, "-o", again)
	if x, y := mustRead(usb), mustRead(again); x != y {
		t.Error("two builds of vm-usb's stick differ")
	}
	for _, m := range [][2]string{{"lab/vm-usb", usb}, {"lab/vm-static", static}} {
		run(t, "ip", "netns", "exec", w.srv, "env", "BOOTOPS_TOKEN_FILE="+token, bootops, "media", "credential", m[0],
			"--server", urlWAN, "--ttl", "2h", "--into", m[1])
	}
	// The generic ISO, as the server hands it out.
	iso := filepath.Join(w.dir, "site.iso")
	run(t, "ip", "netns", "exec", w.srv, "curl", "-sSf", "-o", iso, urlWAN+"/media/lab/media.iso")
	urlVars := httpsBootVars(t, w, ca, "https://"+wanServer+":8443/media/lab/nodes/vm-url/boot.efi")
	t.Logf("timing: lab, Micro-OS, media: %s", time.Since(start).Round(time.Second))

	// The store: vm-static's subnet on the router's LAN side, no DHCP for it.
	run(t, "ip", "-n", w.dhc, "addr", "add", "198.18.61.1/24", "dev", "eth0")
	usbDisk, staticDisk, urlDisk, isoDisk := disk(t, w.lab, "usb"), disk(t, w.lab, "static"), disk(t, w.lab, "url"), disk(t, w.lab, "iso")
	os.Truncate(usbDisk, 3<<30) // Debian's root grows into the rest
	os.Truncate(isoDisk, 3<<30)
	os.Truncate(staticDisk, 3<<30)
	booted := time.Now()
	vmUSB := w.uefiBoot("vm-usb", "52:54:00:e3:00:01", ",romfile=", stick(usb, usbDisk)...)
	vmStatic := w.secureVM("vm-static", "52:54:00:e3:00:02", "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd", stick(static, staticDisk)...)
	vmISO := w.boot("vm-iso", "52:54:00:e3:00:05", ",romfile=", append([]string{"-drive", "file=" + iso + ",media=cdrom,readonly=on,if=ide,index=0",
		"-drive", "file=" + isoDisk + ",if=virtio,format=raw", "-boot", "d"}, w.tpmArgs(isoTPM)...)...)

	// The link goes down for 20 s once vm-usb's image is on its way.
	waitTimeline(t, w.status(t), "lab/vm-usb", "image-to-disk", 15*time.Minute)
	time.Sleep(3 * time.Second)
	t.Logf("timing: power-on → vm-usb's image download started over the WAN: %s; cutting the link for 20 s", time.Since(booted).Round(time.Second))
	<-w.cut(20 * time.Second)

	w.waitAll(t, "provisioned", booted, 15*time.Minute, "vm-usb", "vm-static", "vm-iso")
	waitVMs(3*time.Minute, vmUSB, vmStatic, vmISO)

	// Their media pulled, they boot Debian from their disks — vm-static
	// with Secure Boot still on (the image's shim and GRUB are signed),
	// its static network from Git; vm-iso with its TPM beside it (its
	// reports are quoted by the key its check-in proved) — and their
	// reports cross the WAN: running.
	ranAt := time.Now()
	vmStaticDisk := w.secureVM("vm-static-disk", "52:54:00:e3:00:02", "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd",
		"-drive", "file="+staticDisk+",if=none,id=d0,format=raw", "-device", "virtio-blk-pci,drive=d0,bootindex=0")
	vmUSBDisk := w.uefiBoot("vm-usb-disk", "52:54:00:e3:00:01", ",romfile=", "-drive", "file="+usbDisk+",if=none,id=d0,format=raw",
		"-device", "virtio-blk-pci,drive=d0,bootindex=0")
	vmISODisk := w.boot("vm-iso-disk", "52:54:00:e3:00:05", ",romfile=", append([]string{"-drive", "file=" + isoDisk + ",if=virtio,format=raw", "-boot", "c"},
		w.tpmArgs(isoTPM)...)...)
	w.waitAll(t, "running", ranAt, 12*time.Minute, "vm-usb", "vm-static", "vm-iso")
	if c := mustRead(vmStaticDisk.console); !strings.Contains(c, "Secure boot enabled") {
		t.Errorf("vm-static's installed Debian did not boot with Secure Boot on:\n%s", testutil.Tail(c, 30))
	}
	for _, vm := range []*vm{vmUSBDisk, vmStaticDisk, vmISODisk} {
		vm.cmd.Process.Kill()
	}
	waitVMs(time.Minute, vmUSBDisk, vmStaticDisk, vmISODisk)

	// The firmware's HTTPS boot URL, last: edk2's HTTP boot gave up on the
	// 20 MB UKI across this link at 1 % loss ("Server response timeout",
	// three tries, in this test's first version), so the link loses
	// nothing while the firmware fetches, and 1 % again once the Micro-OS
	// runs and installs.
	w.shape(wanem.Shape{Delay: wanShape.Delay, Rate: wanShape.Rate})
	urlBooted := time.Now()
	vmURL := w.boot("vm-url", "52:54:00:e3:00:04", ",romfile=", append([]string{
		"-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd", "-drive", "if=pflash,format=raw,file=" + urlVars,
		"-drive", "file=" + urlDisk + ",if=virtio,format=raw"}, w.tpmArgs(urlTPM)...)...)
	// Beside it, two machines boot the site's ISO and are held: one Git
	// does not know, and a registered node that shows only its MAC.
	vmUnknown := w.boot("vm-unknown", "52:54:00:e3:00:09", ",romfile=", "-drive", "file="+iso+",media=cdrom,readonly=on,if=ide,index=0", "-boot", "d")
	vmHeld := w.boot("vm-held", "52:54:00:e3:00:03", ",romfile=", "-drive", "file="+iso+",media=cdrom,readonly=on,if=ide,index=0", "-boot", "d")
	vmURL.wait(t, "bootops-microos: starting on kernel", 10*time.Minute)
	t.Logf("timing: vm-url, power-on → the Micro-OS running from the HTTPS boot URL: %s", time.Since(urlBooted).Round(time.Second))
	w.shape(wanShape)
	w.waitState(t, "lab/vm-url", "provisioned", 10*time.Minute)
	t.Logf("timing: vm-url, power-on → provisioned over the WAN: %s", time.Since(urlBooted).Round(time.Second))
	waitVMs(3*time.Minute, vmURL)
	if msg := w.waitState(t, "mac:52:54:00:e3:00:09", "held", 5*time.Minute); !strings.Contains(msg, "unknown machine held") {
		t.Errorf("vm-unknown: %q, want held as an unknown machine", msg)
	}
	vmUnknown.cmd.Process.Kill()
	held := w.waitState(t, "lab/vm-held", "held", 10*time.Minute)
	if !strings.Contains(held, "proves nothing") {
		t.Errorf("vm-held: %q, want held as unproven", held)
	}
	vmHeld.cmd.Process.Kill()
	w.vms(1)
	if _, js := w.status(t).timeline("mac:52:54:00:e3:00:09"); strings.Contains(js, "image-to-disk") {
		t.Errorf("vm-unknown was given more than the Micro-OS:\n%s", js)
	}
	checkDisk(t, urlDisk, rawSHA)

	api := w.status(t)
	for key, boot := range map[string]string{"lab/vm-usb": "uefi, secure boot off, media, tls", "lab/vm-static": "uefi, secure boot, media, tls",
		"lab/vm-url": "uefi, secure boot off, uki, tls", "lab/vm-iso": "bios, media, tls"} {
		if m, _ := api.machine(key); m.Boot != boot {
			t.Errorf("%s booted %q, want %s", key, m.Boot, boot)
		}
		evs, js := api.timeline(key)
		for _, e := range evs {
			// What the server saw the machine come from: the router's
			// WAN address, never a store address.
			if e.Kind == status.KindAgent && e.IP != "" && e.IP != wanRouter && e.IP != wanServer {
				t.Errorf("%s: an agent event from %s: a store address reached the server (no NAT?)", key, e.IP)
			}
		}
		if !strings.Contains(js, `"ip":"`+wanRouter+`"`) {
			t.Errorf("%s: the router's WAN address is not where it came from:\n%s", key, js)
		}
		if proof := map[string]string{"lab/vm-usb": "proved by a media credential", "lab/vm-static": "proved by a media credential"}[key]; proof != "" && !strings.Contains(js, proof) {
			t.Errorf("%s: no check-in by its media credential on its timeline:\n%s", key, js)
		}
	}
	if _, js := api.timeline("lab/vm-usb"); !strings.Contains(js, "resuming") {
		t.Errorf("vm-usb: no resumed download after the cut on its timeline:\n%s", js)
	}
	con := mustRead(vmStatic.console)
	if !strings.Contains(con, "static 198.18.61.20/24 via 198.18.61.1") || strings.Contains(con, "bootops-microos: dhcp on") {
		t.Errorf("vm-static did not bring up its static network from Git (or ran DHCP):\n%s", testutil.Tail(con, 40))
	}
	if !strings.Contains(mustRead(vmURL.console), "https://"+wanServer+":8443/media/lab/nodes/vm-url/boot.efi") {
		t.Errorf("vm-url's firmware did not boot the HTTPS URL:\n%s", testutil.Tail(mustRead(vmURL.console), 40))
	}
	if _, js := api.timeline("lab/vm-held"); strings.Contains(js, "workflow") || strings.Contains(js, "image-to-disk") {
		t.Errorf("vm-held was given more than the Micro-OS:\n%s", js)
	}

	// vm-usb again from the same stick: its credential is spent.
	vmUSB = w.uefiBoot("vm-usb-again", "52:54:00:e3:00:01", ",romfile=", stick(usb, usbDisk)...)
	vmUSB.wait(t, "check-in refused", 8*time.Minute)
	vmUSB.cmd.Process.Kill()
	if _, js := api.timeline("lab/vm-usb"); !strings.Contains(js, "identity-conflict") {
		t.Errorf("vm-usb's second boot from a spent credential is not an identity conflict:\n%s", js)
	}
	t.Logf("timing: TestEdgeOverTheInternet %s", time.Since(start).Round(time.Second))
}

// httpsBootVars is an OVMF variable store whose first boot option is the
// HTTPS URL uri, trusting the PEM CA ca: what an operator sets in the
// firmware's setup.
func httpsBootVars(t *testing.T, w *wanLab, ca, uri string) string {
	t.Helper()
	tmpl, err := os.ReadFile("/usr/share/OVMF/OVMF_VARS_4M.fd")
	if err != nil {
		t.Fatalf("OVMF is missing (Debian package ovmf): %v", err)
	}
	block, _ := pem.Decode([]byte(mustRead(ca)))
	if block == nil {
		t.Fatalf("%s holds no PEM certificate", ca)
	}
	vars, err := ovmfvars.SetBootURI(tmpl, "bootops HTTPS boot", uri)
	if err == nil {
		vars, err = ovmfvars.SetTLSCA(vars, block.Bytes)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(w.dir, "vm-url-vars.fd")
	if err := os.WriteFile(p, vars, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// stick boots a VM from a USB image first, then its disk.
func stick(img, disk string) []string {
	return []string{"-device", "qemu-xhci,id=xhci", "-drive", "if=none,id=stick,format=raw,file=" + img,
		"-device", "usb-storage,bus=xhci.0,drive=stick,bootindex=0",
		"-drive", "file=" + disk + ",if=none,id=d0,format=raw", "-device", "virtio-blk-pci,drive=d0,bootindex=1"}
}

// status is the daemon's status API, asked from the server's own
// namespace: the tests' questions neither cross the shaped link nor fail
// while it is cut.
func (w *wanLab) status(t *testing.T) statusClient {
	return statusClient{t: t, ns: w.srv, server: urlWAN}
}

// waitState waits (at most d) until the machine is in state want, and
// returns its last message then.
func (w *wanLab) waitState(t *testing.T, key, want string, d time.Duration) string {
	t.Helper()
	var m status.Machine
	if testutil.Poll(d, every, func() bool { m, _ = w.status(t).machine(key); return m.State == want }) {
		return m.Last.Message
	}
	t.Fatalf("%s: state %q (%s), want %q after %s\nbootops log:\n%s", key, m.State, m.Last.Message, want, d, testutil.Tail(w.log("bootops"), 30))
	return ""
}

// waitAll waits (at most d) until each of the lab site's nodes is in state
// want, and logs when each first was, counted from since.
func (w *wanLab) waitAll(t *testing.T, want string, since time.Time, d time.Duration, nodes ...string) {
	t.Helper()
	at := map[string]time.Duration{}
	testutil.Poll(d, every, func() bool {
		for _, n := range nodes {
			if m, _ := w.status(t).machine("lab/" + n); m.State == want && at[n] == 0 {
				at[n] = time.Since(since).Round(time.Second)
				t.Logf("timing: %s, power-on → %s over the WAN: %s", n, want, at[n])
			}
		}
		return len(at) == len(nodes)
	})
	for _, n := range nodes {
		if at[n] == 0 {
			w.waitState(t, "lab/"+n, want, time.Second) // fails, saying where it is
		}
	}
}

// waitTimeline waits until key's timeline mentions want.
func waitTimeline(t *testing.T, api statusClient, key, want string, d time.Duration) {
	t.Helper()
	var js string
	if !testutil.Poll(d, 2*time.Second, func() bool {
		_, js = api.timeline(key)
		return strings.Contains(js, want)
	}) {
		t.Fatalf("%s: %q not on its timeline after %s:\n%s", key, want, d, js)
	}
}
