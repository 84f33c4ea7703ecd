package fleet

import (
	"os"
	"path/filepath"
)

// FakeSysfs writes, under d, the /sys a simulated agent reads: the
// machine's serial, one NIC with mac, one 1 GiB disk. It returns d.
func FakeSysfs(d, serial, mac string) string {
	for name, body := range map[string]string{
		"class/dmi/id/product_serial": serial, "class/dmi/id/product_uuid": "",
		"class/net/eth0/address": mac, "block/vda/size": "2097152", "block/vda/removable": "0",
	} {
		p := filepath.Join(d, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body+"\n"), 0o644)
	}
	os.MkdirAll(filepath.Join(d, "class/net/eth0/device"), 0o755)
	return d
}
