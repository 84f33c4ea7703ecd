//go:build e2e

package e2e

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootops/bootops/boot/status"
	"github.com/bootops/bootops/internal/testutil"
)

// The peers' test image: the test image's ext4 partition, and a second
// partition of random bytes, which nothing writes to after image-to-disk:
// on every disk it must be the source, byte for byte.
const (
	peersDataStart = imagePartStart + imagePartSize
	peersDataSize  = 40 << 20
	peersImageSize = peersDataStart + peersDataSize + 1<<20
)

// peersImage builds dir/peers.raw.gz and returns its sha256 and the raw
// image.
func peersImage(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	return buildImage(t, dir, "peers.raw", peersImageSize, "start=2048, size=65536, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n"+
		"start=67584, size=81920, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=data\n", func(b []byte) {
		rand.NewChaCha8([32]byte{7}).Read(b[peersDataStart : peersDataStart+peersDataSize])
	})
}

// Three VMs install the same image with imageDelivery: peers. The third
// cannot reach the server's chunks nor the image's URL (nftables drops
// its packets to those ports, by its MAC): all of its image comes from
// the other two, checked chunk by chunk and read back whole. Every disk
// holds the image byte for byte; the status shows each node's bytes from
// the server and from peers.
func TestPeers(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatal("nft is missing: run `make e2e`, which installs nftables")
	}
	l := newLab(t, true)
	l.vms(3)
	imgDir := t.TempDir()
	sum, img := peersImage(t, imgDir)
	l.start("images", "ip", "netns", "exec", l.lan, imageServer, "-dir", imgDir, "-addr", "198.18.0.1:8081")

	vms := []struct{ name, mac, serial, node string }{
		{"peer-a", "52:54:00:e2:30:01", "E2E-PEER-1", "vm-peer-a"},
		{"peer-b", "52:54:00:e2:30:02", "E2E-PEER-2", "vm-peer-b"},
		{"peer-c", "52:54:00:e2:30:03", "E2E-PEER-3", "vm-peer-c"}, // peers only
	}
	// The third VM's route to the image's URL (8081) and to the server's
	// chunks (8082) is cut; the server's API (8080) stays.
	rules := "table inet peers {\n chain in {\n  type filter hook input priority 0;\n" +
		"  ether saddr " + vms[2].mac + " tcp dport { 8081, 8082 } counter reject with tcp reset\n }\n}\n"
	nft := exec.Command("ip", "netns", "exec", l.lan, "nft", "-f", "-")
	nft.Stdin = strings.NewReader(rules)
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}

	l.serve(provisionRepo(t, images4, sum, "peers", nil), "--swarm-addr", "198.18.0.1:8082")

	disks := map[string]string{}
	var wg sync.WaitGroup
	start := time.Now()
	for _, v := range vms {
		disks[v.name] = disk(t, l, v.name)
		vm := l.vm(v.name, v.mac, append(withDisk(disks[v.name]), "-smbios", "type=1,serial="+v.serial)...)
		wg.Go(func() {
			if vm.exit(8 * time.Minute) {
				t.Logf("timing: VM start → provisioned and rebooted, image from peers: %s (%s)", time.Since(start).Round(time.Second), vm.name)
			}
		})
	}
	wg.Wait()

	image := map[string]*status.ImageSources{}
	for _, m := range l.status().Nodes {
		if m.Image != nil {
			image[m.Key] = m.Image
		}
	}
	var total float64
	for i, v := range vms {
		key := "lab/" + v.node
		waitState(t, l, key, "provisioned", 30*time.Second)
		logs := l.logs(key)
		if !strings.Contains(logs, "fetching the image") || !strings.Contains(logs, "read back, sha256") || !strings.Contains(logs, "of sha256 "+sum) {
			t.Errorf("%s: the timeline lacks the fetch with peers and its check:\n%s", v.name, testutil.Tail(logs, 30))
		}
		if strings.Contains(logs, "fetching it from http") {
			t.Errorf("%s: fell back to the image's URL:\n%s", v.name, testutil.Tail(logs, 30))
		}
		im := image[key]
		if im == nil {
			t.Errorf("%s: no image sources in the status", key)
			continue
		}
		server, peers := float64(im.FromServer), float64(im.FromPeers)
		t.Logf("%s: %.1f MB from the server, %.1f MB from peers", key, server/(1<<20), peers/(1<<20))
		if i == 2 && (server != 0 || peers < peersDataSize) {
			t.Errorf("%s (server route cut): %v bytes from the server, %v from peers", key, server, peers)
		}
		// The cut route's refusal, as the agent met it.
		if i == 2 && !(strings.Contains(logs, "from the server: Get \"http://198.18.0.1:8082/swarm/") && strings.Contains(logs, "connection refused: fetching it elsewhere")) {
			t.Errorf("%s: its timeline lacks the server's chunks refused:\n%s", key, testutil.Tail(logs, 40))
		}
		total += server + peers
		b, err := os.ReadFile(disks[v.name])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b[peersDataStart:peersDataStart+peersDataSize], img[peersDataStart:peersDataStart+peersDataSize]) {
			t.Errorf("%s: the data partition is not the image's, byte for byte", v.name)
		}
		if outsidePartition(b) != outsidePartition(img) {
			t.Errorf("%s: the MBR's boot code or the GPT's entries are not the image's", v.name)
		}
		part := disks[v.name] + ".p1"
		os.WriteFile(part, b[imagePartStart:imagePartStart+imagePartSize], 0o644)
		if got := run(t, "debugfs", "-R", "cat /etc/bootops-test-image", part); !strings.Contains(got, strings.TrimSpace(imageMarker)) {
			t.Errorf("%s: /etc/bootops-test-image: %q", v.name, got)
		}
	}
	// The cut route was tried, and refused.
	if rs := run(t, "ip", "netns", "exec", l.lan, "nft", "list", "table", "inet", "peers"); strings.Contains(rs, "packets 0 ") {
		t.Errorf("the third VM never tried the server's chunks:\n%s", rs)
	}
	metrics := run(t, "ip", "netns", "exec", l.lan, "python3", "-c", "import urllib.request; print(urllib.request.urlopen(\"http://198.18.0.1:8080/metrics\").read().decode())")
	for _, want := range []string{`bootops_swarm_bytes_total{from="peers"}`, `bootops_swarm_failed_transfers_total{why="gone"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if out := run(t, "ip", "netns", "exec", l.lan, bootops, "status", "--server", "http://198.18.0.1:8080"); !strings.Contains(out, "IMAGE FROM") || !strings.Contains(out, "server 0 MB, peers") {
		t.Errorf("bootops status lacks the image's sources:\n%s", out)
	}
}
