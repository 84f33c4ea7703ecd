// Package fleet generates synthetic fleet repositories for benchmarks and
// scale tests: N sites, M nodes spread over them, one node per file, two
// profiles, one Micro-OS. `go run ./test/fleet/gen` is its command.
package fleet

import (
	"fmt"
	"os"
	"path/filepath"
)

// NodeFile is the path of node i's file in a generated repository.
func NodeFile(sites, i int) string {
	return fmt.Sprintf("sites/site-%03d/nodes/node-%05d.yaml", i%sites, i)
}

// Generate writes the repository under dir, which must not exist.
func Generate(dir string, sites, nodes int) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	write := func(name, body string) error {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(body), 0o644)
	}
	if err := write("microos/default.yaml", `apiVersion: bootops.dev/v1alpha1
kind: MicroOS
name: default
kernel:
  url: http://mirror.example.internal/microos/vmlinuz
  sha256: 3b9e0f1c2d4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344
initrd:
  url: http://mirror.example.internal/microos/initrd.img
  sha256: 4c0a1f2e3d5b6c7d8e9fa0112233445566778899aabbccddeeff001122334455
`); err != nil {
		return err
	}
	for _, p := range []struct{ name, typ, comp string }{{"edge-immutable", "immutable", "gz"}, {"edge-mutable", "mutable", "none"}} {
		if err := write("profiles/"+p.name+".yaml", fmt.Sprintf(`apiVersion: bootops.dev/v1alpha1
kind: Profile
name: %s
os:
  type: %s
image:
  url: http://mirror.example.internal/images/%s.raw.gz
  sha256: aba2c9d06fdff3e9329ddd3e8be90714ac05250b4260a0c7ae04dd4406db25a9
  compression: %s
cloudInit:
  hostname: ${hostname}
  write_files:
    - path: /etc/edge/site
      content: ${site}
`, p.name, p.typ, p.name, p.comp)); err != nil {
			return err
		}
	}
	for s := range sites {
		site := fmt.Sprintf("site-%03d", s)
		if err := write("sites/"+site+"/site.yaml", fmt.Sprintf(`apiVersion: bootops.dev/v1alpha1
kind: Site
name: %s
network:
  serverAddress: 198.18.%d.1
defaultProfile: edge-immutable
`, site, s%256)); err != nil {
			return err
		}
	}
	for i := range nodes {
		profile := "edge-immutable"
		if i%3 == 0 {
			profile = "edge-mutable"
		}
		body := fmt.Sprintf(`apiVersion: bootops.dev/v1alpha1
kind: Node
name: node-%05d
identity:
  serial: SN%08d
  mac: 52:54:%02x:%02x:%02x:%02x
  uuid: 4c4c4544-0041-3110-8042-%012x
profile: %s
labels:
  rack: r%d
  row: "%d"
`, i, i, (i>>24)&0xff, (i>>16)&0xff, (i>>8)&0xff, i&0xff, i, profile, i%40, i%7)
		if err := write(NodeFile(sites, i), body); err != nil {
			return err
		}
	}
	return nil
}
