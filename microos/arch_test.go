package microos

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The kernel's family from its header: an x86 bzImage, an arm64 Image,
// and Debian's arm64 vmlinuz (the Image gzipped); anything else none.
func TestKernelArch(t *testing.T) {
	bz := make([]byte, 0x300)
	copy(bz[0x202:], "HdrS")
	img := make([]byte, 0x100)
	copy(img[0x38:], "ARM\x64")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(img)
	zw.Close()
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"bzImage": {bz, ArchX86_64}, "arm64 Image": {img, ArchARM64}, "gzipped arm64 Image": {gz.Bytes(), ArchARM64},
		"neither": {make([]byte, 0x300), ""}, "short": {[]byte{0x1f, 0x8b}, ""},
	} {
		if got := kernelArch(c.b); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}

// An agent or busybox built for another family than the Micro-OS is
// refused, saying how to build the right one.
func TestProgramsOfAnotherArch(t *testing.T) {
	dir := t.TempDir()
	prog := func(name string, m elf.Machine) string {
		// An ELF64 header alone: enough for debug/elf to read the machine.
		h := make([]byte, 64)
		copy(h, "\x7fELF")
		h[4], h[5], h[6] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
		binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_EXEC))
		binary.LittleEndian.PutUint16(h[18:], uint16(m))
		binary.LittleEndian.PutUint32(h[20:], uint32(elf.EV_CURRENT))
		binary.LittleEndian.PutUint16(h[52:], 64)
		p := filepath.Join(dir, name)
		os.WriteFile(p, h, 0o755)
		return p
	}
	x86, arm := prog("agent-amd64", elf.EM_X86_64), prog("agent-arm64", elf.EM_AARCH64)
	if err := checkELFArch(arm, "bootops-agent", ArchARM64); err != nil {
		t.Errorf("an arm64 agent for an arm64 Micro-OS: %v", err)
	}
	err := checkELFArch(x86, "bootops-agent", ArchARM64)
	if err == nil || !strings.Contains(err.Error(), "is built for x86_64, the Micro-OS for arm64 (build it with GOARCH=arm64") {
		t.Errorf("an x86 agent for an arm64 Micro-OS: %v", err)
	}
	if err := checkELFArch(arm, "busybox", ArchX86_64); err == nil || !strings.Contains(err.Error(), "busybox "+arm+" is built for arm64, the Micro-OS for x86_64") {
		t.Errorf("an arm64 busybox for an x86 Micro-OS: %v", err)
	}
	if _, err := Build(Options{Arch: "riscv64", Kernel: x86, Agent: x86}, t.TempDir()); err == nil || !strings.Contains(err.Error(), `arch "riscv64": want x86_64 or arm64`) {
		t.Errorf("an unknown arch: %v", err)
	}
}
