package ovmfvars

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// GlobalVariable is EFI_GLOBAL_VARIABLE, the vendor of Boot#### and
// BootOrder.
var GlobalVariable = MustParseGUID("8be4df61-93ca-11d2-aa0d-00e098032b8c")

// LoadOptionActive is LOAD_OPTION_ACTIVE: the boot manager tries the option.
const LoadOptionActive uint32 = 0x1

// bootAttrs are the attributes the UEFI spec gives Boot#### and BootOrder.
const bootAttrs = AttrNonVolatile | AttrBootService | AttrRuntime

// Device path node types and subtypes (UEFI spec, chapter 10).
const (
	dpMessaging = 0x03
	dpURI       = 0x18 // MSG_URI_DP
	dpEnd       = 0x7f
	dpEndEntire = 0xff
	dpHeader    = 4
)

// LoadOption is an EFI_LOAD_OPTION, the value of a Boot#### variable.
type LoadOption struct {
	Attributes   uint32
	Description  string
	FilePath     []byte // the device path list, end node included
	OptionalData []byte
}

// URIDevicePath is the short-form device path of an HTTP(S) boot: one URI
// node (Messaging, subtype 24) and the end node. edk2's boot manager
// expands it by offering it to every LoadFile instance (BmExpandUriDevicePath):
// the PXE ones refuse a file path that is not empty, HttpBootDxe's take the
// URI from it, so the option is bound to no NIC, MAC or PCI slot.
func URIDevicePath(uri string) []byte {
	n := dpHeader + len(uri)
	b := []byte{dpMessaging, dpURI, 0, 0}
	binary.LittleEndian.PutUint16(b[2:], uint16(n))
	b = append(b, uri...)
	return append(b, dpEnd, dpEndEntire, dpHeader, 0)
}

// PathURI returns the URI of a device path that holds a URI node.
func PathURI(path []byte) (string, bool) {
	for len(path) >= dpHeader {
		typ, sub, n := path[0], path[1], int(binary.LittleEndian.Uint16(path[2:]))
		if n < dpHeader || n > len(path) || typ == dpEnd && sub == dpEndEntire {
			return "", false
		}
		if typ == dpMessaging && sub == dpURI {
			return string(path[dpHeader:n]), true
		}
		path = path[n:]
	}
	return "", false
}

// Marshal encodes the option as the Boot#### variable's data.
func (o LoadOption) Marshal() []byte {
	desc := encodeName(o.Description)
	b := binary.LittleEndian.AppendUint32(nil, o.Attributes)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(o.FilePath)))
	b = append(b, desc...)
	b = append(b, o.FilePath...)
	return append(b, o.OptionalData...)
}

// ParseLoadOption decodes a Boot#### variable's data.
func ParseLoadOption(b []byte) (LoadOption, error) {
	if len(b) < 6 {
		return LoadOption{}, fmt.Errorf("ovmfvars: load option of %d bytes is too short", len(b))
	}
	o := LoadOption{Attributes: binary.LittleEndian.Uint32(b)}
	pathLen := int(binary.LittleEndian.Uint16(b[4:]))
	rest := b[6:]
	end := -1
	for i := 0; i+1 < len(rest); i += 2 {
		if rest[i] == 0 && rest[i+1] == 0 {
			end = i
			break
		}
	}
	if end < 0 {
		return LoadOption{}, errors.New("ovmfvars: load option's description has no terminating NUL")
	}
	o.Description = decodeName(rest[:end+2])
	rest = rest[end+2:]
	if pathLen > len(rest) {
		return LoadOption{}, fmt.Errorf("ovmfvars: load option's device path of %d bytes overruns its %d remaining bytes", pathLen, len(rest))
	}
	o.FilePath, o.OptionalData = rest[:pathLen], rest[pathLen:]
	return o, nil
}

// SetBootURI returns a copy of vars with an active boot option for uri,
// described as desc, first in BootOrder. An option of the same
// description is replaced in place (its number kept); otherwise the
// lowest free Boot#### number is taken. The firmware keeps the option
// across boots: only auto-created options (those whose optional data is
// edk2's auto-create GUID) are pruned by its boot option refresh.
//
// What the firmware does with it (edk2 2022.11, Debian's OVMF, proved by
// this package's e2e test): HttpBootDxe still runs DHCP for the address
// (a plain offer will do; no DHCP server, no boot), tries IPv4 and then
// IPv6, HEADs then GETs the URI, and for https trusts only the CAs of
// TlsCaCertificate (SetTLSCA). QEMU's bootindex properties reorder
// BootOrder at every boot: the options they match come first, this one
// after them.
func SetBootURI(vars []byte, desc, uri string) ([]byte, error) {
	if err := checkBootURI(uri); err != nil {
		return nil, err
	}
	s, err := Parse(vars)
	if err != nil {
		return nil, err
	}
	num, err := bootNumber(s, desc)
	if err != nil {
		return nil, err
	}
	opt := LoadOption{Attributes: LoadOptionActive, Description: desc, FilePath: URIDevicePath(uri)}
	out, err := Set(vars, bootName(num), GlobalVariable, bootAttrs, opt.Marshal())
	if err != nil {
		return nil, err
	}
	order := []uint16{num}
	if v, ok := s.Get("BootOrder", GlobalVariable); ok {
		for _, n := range BootOrder(v.Data) {
			if n != num {
				order = append(order, n)
			}
		}
	}
	return Set(out, "BootOrder", GlobalVariable, bootAttrs, encodeOrder(order))
}

// checkBootURI refuses what HttpBootDxe would: a scheme other than http
// or https, or no host. Whether plain http is allowed is the firmware
// build's choice (PcdAllowHttpConnections), so it is not refused here.
func checkBootURI(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return fmt.Errorf("ovmfvars: boot URI: %v", err)
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" || u.Host == "" {
		return fmt.Errorf("ovmfvars: boot URI %q: the firmware boots only http:// or https:// URLs with a host", uri)
	}
	if len(uri) > 0xffff-2*dpHeader {
		return fmt.Errorf("ovmfvars: boot URI of %d bytes is too long for a device path node", len(uri))
	}
	return nil
}

// bootNumber is the number of the Boot#### option described as desc, or
// the lowest number no Boot#### variable uses.
func bootNumber(s *Store, desc string) (uint16, error) {
	used := map[uint16]bool{}
	for _, v := range s.Variables {
		n, ok := parseBootName(v.Name)
		if v.Vendor != GlobalVariable || !ok || !v.Live() {
			continue
		}
		used[n] = true
		if o, err := ParseLoadOption(v.Data); err == nil && o.Description == desc {
			return n, nil
		}
	}
	for n := 0; n <= 0xffff; n++ {
		if !used[uint16(n)] {
			return uint16(n), nil
		}
	}
	return 0, errors.New("ovmfvars: every Boot#### number is taken")
}

// bootName is the variable's name: edk2 prints the number with "%04x",
// which its PrintLib renders in upper case, as the UEFI spec asks.
func bootName(n uint16) string { return fmt.Sprintf("Boot%04X", n) }

func parseBootName(name string) (uint16, bool) {
	hex, ok := strings.CutPrefix(name, "Boot")
	if !ok || len(hex) != 4 || strings.ToUpper(hex) != hex {
		return 0, false
	}
	n, err := strconv.ParseUint(hex, 16, 16)
	return uint16(n), err == nil
}

// BootOrder decodes BootOrder's data: little-endian option numbers.
func BootOrder(b []byte) []uint16 {
	out := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		out = append(out, binary.LittleEndian.Uint16(b[i:]))
	}
	return out
}

func encodeOrder(order []uint16) []byte {
	b := make([]byte, 0, 2*len(order))
	for _, n := range order {
		b = binary.LittleEndian.AppendUint16(b, n)
	}
	return b
}
