package testutil

import "strings"

// CPIOFile is the content of name in a newc cpio archive a (small
// archives with ASCII headers, as an initrd or a site overlay is), or ""
// when it holds no such file.
func CPIOFile(a, name string) string {
	for len(a) >= 110 && a[:6] == "070701" {
		var size, nameLen int64
		for i, f := range []*int64{&size, &nameLen} {
			off := []int{54, 94}[i]
			for _, c := range a[off : off+8] {
				*f = *f*16 + int64(strings.IndexRune("0123456789ABCDEF", c))
			}
		}
		n := a[110 : 110+nameLen-1]
		start := (110 + int(nameLen) + 3) &^ 3
		if n == name {
			return a[start : start+int(size)]
		}
		a = a[(start+int(size)+3)&^3:]
	}
	return ""
}
