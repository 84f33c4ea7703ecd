// Package microos builds the bootops Micro-OS: the kernel a node boots
// into from the network and an initramfs around bootops-agent.
//
// The kernel is used as it is (Debian's linux-image-amd64 works); the
// initramfs carries a static busybox, the agent, and the kernel modules the
// kernel lacks for common NICs, disks and filesystems, resolved from the
// kernel's modules.dep and stored uncompressed because busybox insmod loads
// plain ELF files only. Its /init loads them, gets an address by DHCP and
// runs the agent. The same inputs always give a byte-identical initrd.img,
// so its sha256 can be committed beside the MicroOS object that names it.
package microos
