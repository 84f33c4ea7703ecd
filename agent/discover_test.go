package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bootops/bootops/plan"
)

// fakeSysfs writes files (path → content) under a temporary directory; a
// content of "/" makes a directory.
func fakeSysfs(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if content == "/" {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestIdentity(t *testing.T) {
	for name, c := range map[string]struct {
		files map[string]string
		want  plan.Identity
	}{
		"server": {
			files: map[string]string{
				"class/dmi/id/product_uuid":   "4C4C4544-0042-3510-8052-B4C04F564433\n",
				"class/dmi/id/product_serial": " abc123x \n",
				"class/net/lo/address":        "00:00:00:00:00:00\n",
				"class/net/eno1/address":      "52:54:00:AB:CD:EF\n",
				"class/net/eno1/device":       "/",
				"class/net/eno2/address":      "52:54:00:ab:cd:f0\n",
				"class/net/eno2/device":       "/",
				"class/net/br0/address":       "52:54:00:ab:cd:ef\n", // virtual: no device
				"class/net/ib0/address":       "80:00:02:08:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01\n",
				"class/net/ib0/device":        "/",
				"class/net/eth9/address":      "00:00:00:00:00:00\n",
				"class/net/eth9/device":       "/",
			},
			want: plan.Identity{
				MACs:   []string{"52:54:00:ab:cd:ef", "52:54:00:ab:cd:f0"},
				UUID:   "4c4c4544-0042-3510-8052-b4c04f564433",
				Serial: "ABC123X",
			},
		},
		"placeholders": {
			files: map[string]string{
				"class/dmi/id/product_uuid":   "00000000-0000-0000-0000-000000000000\n",
				"class/dmi/id/product_serial": "To Be Filled By O.E.M.\n",
			},
		},
		"more placeholders": {
			files: map[string]string{
				"class/dmi/id/product_uuid":   "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF\n",
				"class/dmi/id/product_serial": "0000000\n",
			},
		},
		"nothing": {files: map[string]string{"class": "/"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Identity(fakeSysfs(t, c.files))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Identity = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestDisksAndAuto(t *testing.T) {
	sysfs := fakeSysfs(t, map[string]string{
		"block/vda/size":              "2097152\n",
		"block/vda/removable":         "0\n",
		"block/vda/serial":            "VIRTIO-1\n",
		"block/sda/size":              "30031872\n",
		"block/sda/removable":         "1\n",
		"block/sda/device/model":      "USB Stick       \n",
		"block/sda/device/serial":     "X1\n",
		"block/nvme0n1/size":          "1953525168\n",
		"block/nvme0n1/removable":     "0\n",
		"block/nvme0n1/device/model":  "Samsung SSD 980\n",
		"block/nvme0n1/device/serial": "S64DNF0R\n",
		"block/loop0/size":            "100\n",
		"block/ram0/size":             "100\n",
		"block/zram0/size":            "100\n",
		"block/sr0/size":              "100\n",
		"block/dm-0/size":             "100\n",
	})
	got, err := Disks(sysfs)
	if err != nil {
		t.Fatal(err)
	}
	want := []plan.Disk{
		{Name: "nvme0n1", Size: 1953525168 * 512, Model: "Samsung SSD 980", Serial: "S64DNF0R"},
		{Name: "sda", Size: 30031872 * 512, Model: "USB Stick", Serial: "X1", Removable: true},
		{Name: "vda", Size: 2097152 * 512, Serial: "VIRTIO-1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Disks =\n%+v\nwant\n%+v", got, want)
	}

	for name, want := range map[string]string{"": "/dev/nvme0n1", "auto": "/dev/nvme0n1", "/dev/sdb": "/dev/sdb"} {
		if got, err := resolveDisk(sysfs, name); err != nil || got != want {
			t.Errorf("resolveDisk(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	usbOnly := fakeSysfs(t, map[string]string{"block/sda/size": "100\n", "block/sda/removable": "1\n", "block/vdb/size": "0\n"})
	if got, err := resolveDisk(usbOnly, "auto"); err == nil {
		t.Errorf("resolveDisk(auto) = %q with only a removable and an empty disk, want an error", got)
	}
}
