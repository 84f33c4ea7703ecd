package plan

import "testing"

func TestPartitionDevice(t *testing.T) {
	for disk, want := range map[string]string{
		"/dev/vda":          "/dev/vda2",
		"/dev/sda":          "/dev/sda2",
		"/dev/xvdb":         "/dev/xvdb2",
		"/dev/nvme0n1":      "/dev/nvme0n1p2",
		"/dev/mmcblk0":      "/dev/mmcblk0p2",
		"/dev/loop7":        "/dev/loop7p2",
		"/tmp/TestX/001/vd": "/tmp/TestX/001/vd2",
	} {
		if got := PartitionDevice(disk, 2); got != want {
			t.Errorf("PartitionDevice(%q, 2) = %q, want %q", disk, got, want)
		}
	}
	if got := PartitionDevice("/dev/sda", 0); got != "/dev/sda1" {
		t.Errorf("PartitionDevice(/dev/sda, 0) = %q, want the default partition /dev/sda1", got)
	}
}
