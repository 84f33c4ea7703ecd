//go:build e2e && edgebench

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bootops/bootops/test/bench/wan/wanem"
)

// TestEdgeBench is the edge nodes' benchmark (bash test/bench/edge.sh,
// BENCHMARKS.md): one OVMF machine boots its USB stick, installs Debian
// (292 MB gzip) and, its stick pulled, runs it — across the WAN lab's
// link shaped as the edge tests shape it, and with nothing shaped (a
// LAN's speed, through the same NAT), one after the other. It prints each
// step's time; it asserts only that each step happened.
func TestEdgeBench(t *testing.T) {
	debDir, debSHA := debianImage(t)
	var rows []string
	for _, c := range []struct {
		name  string
		shape wanem.Shape
	}{{"unshaped (a LAN)", wanem.Shape{}}, {"WAN: 50 ms each way, 1 % loss, 20 Mbit/s", wanShape}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWANLab(t, c.shape, true)
			w.vms(1)
			state := filepath.Join(w.dir, "state")
			run(t, bootops, "ca", "init", "--host", wanServer, "--state-dir", state)
			w.start("debian", "ip", "netns", "exec", w.srv, imageServer, "-dir", debDir, "-addr", wanServer+":8082")
			repo := filepath.Join(t.TempDir(), "repo")
			run(t, bootops, "microos", "build", "--kernel", kernel(t), "--agent", agentBin, "-o", filepath.Join(repo, "microos"))
			writeRepo(t, repo, vars{"DebianSHA": debSHA}, "edge-bench")
			token := filepath.Join(w.dir, "ui-token")
			os.WriteFile(token, []byte("bench-operator-token\n"), 0o600)
			w.serve(repo, "--https-addr", wanServer+":8443", "--ui-token-file", token)
			img := filepath.Join(w.dir, "stick.img")
			run(t, bootops, "media", "usb", repo, "--site", "lab", "--node", "vm-bench", "--ca", filepath.Join(state, "tls/ca.pem"), "-o", img)
			run(t, "ip", "netns", "exec", w.srv, "env", "BOOTOPS_TOKEN_FILE="+token, bootops, "media", "credential", "lab/vm-bench",
				"--server", urlWAN, "--into", img)
			d := disk(t, w.lab, "bench")
			os.Truncate(d, 3<<30)
			on := time.Now()
			vm := w.uefiBoot("vm-bench", "52:54:00:e3:10:01", ",romfile=", stick(img, d)...)
			w.waitState(t, "lab/vm-bench", "provisioned", 30*time.Minute)
			provisioned := time.Since(on)
			waitVMs(3*time.Minute, vm)
			again := time.Now()
			vm = w.uefiBoot("vm-bench-disk", "52:54:00:e3:10:01", ",romfile=", "-drive", "file="+d+",if=none,id=d0,format=raw",
				"-device", "virtio-blk-pci,drive=d0,bootindex=0")
			w.waitState(t, "lab/vm-bench", "running", 15*time.Minute)
			running := time.Since(again)
			vm.cmd.Process.Kill()
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", c.name, provisioned.Round(time.Second), running.Round(time.Second),
				(provisioned+running).Round(time.Second)))
		})
	}
	t.Logf("\n| link | power-on → provisioned (stick) | power-on from disk → running | in all |\n| --- | --- | --- | --- |\n%s\n%s", rows[0], rows[len(rows)-1])
}
