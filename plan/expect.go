package plan

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Expect is the hardware a node's order says it has, from Git (a Profile's
// expect: with its Node's over it, field by field), checked against the
// Inventory its agent sends at check-in. Comparisons are strings such as
// ">=16Gi" (see ParseComparison); an empty field expects nothing.
//
// Memory is compared with Inventory.Memory.Total, what the OS sees: a
// little less than the installed RAM (the firmware and the kernel keep
// some), so a 16 GiB machine shows about 15.6Gi. There is no tolerance:
// operators write a bit below the installed size (">=15Gi" for 16 GiB).
type Expect struct {
	CPUThreads string `json:"cpuThreads,omitempty"` // a count: ">=8", "16", "<=64"
	Memory     string `json:"memory,omitempty"`     // a size: ">=15Gi", ">=15.5G"
	// Disks: each entry on its own (a disk may count for more than one)
	// wants at least Count disks that match it.
	Disks []DiskExpect `json:"disks,omitempty"`
	NICs  *NICExpect   `json:"nics,omitempty"`
	PCI   []PCIExpect  `json:"pci,omitempty"`
}

// DiskExpect wants at least Count (default 1) disks of at least MinSize
// ("480G", "1.5Ti"; empty: any size) and, when set, rotational or not and
// of the transport (sata, sas, nvme, virtio, …).
type DiskExpect struct {
	MinSize    string `json:"minSize,omitempty"`
	Count      int    `json:"count,omitempty"`
	Rotational *bool  `json:"rotational,omitempty"`
	Transport  string `json:"transport,omitempty"`
}

// NICExpect compares the number of NICs whose speed meets Speed (every NIC
// when Speed is empty) with Count (">=1" when empty). A NIC whose link is
// down tells no speed and meets no Speed.
type NICExpect struct {
	Count string `json:"count,omitempty"` // ">=2"
	Speed string `json:"speed,omitempty"` // ">=10G"
}

// PCIExpect wants at least Count (default 1) PCI devices of Vendor
// and, when set, of the device and of the class. IDs are four hex digits
// ("8086", "1572"); Class is the class and subclass ("0300") or the class
// alone ("03").
type PCIExpect struct {
	Vendor string `json:"vendor"`
	Device string `json:"device,omitempty"`
	Class  string `json:"class,omitempty"`
	Count  int    `json:"count,omitempty"`
}

// Unit is what a comparison's number measures.
type Unit int

const (
	// UnitCount is a whole number: "8".
	UnitCount Unit = iota
	// UnitBytes is a size in bytes, with a binary (Ki, Mi, Gi, Ti) or
	// decimal (K, M, G, T) suffix or none: "16Gi", "480G", "1.5Ti".
	UnitBytes
	// UnitMbps is a link speed in megabits per second, with M or G
	// (10G = 10000) or none: "10G", "100M", "2500". Without a suffix it
	// must be at least 100, so that "10" meant as 10G is not read as
	// 10 Mb/s.
	UnitMbps
)

// MaxMbps is the fastest link speed a comparison may name (800G).
const MaxMbps = 800_000

// Comparison is a parsed expectation: Op and a Value in the unit's base
// (bytes, Mb/s or a count), with the suffix it was written with, which
// found values are printed in.
type Comparison struct {
	Op     string // ">=", ">", "<=", "<" or "="
	Value  float64
	Unit   Unit
	Suffix string // "Gi", "G", "M", … or ""
}

var multipliers = map[Unit]map[string]float64{
	UnitCount: {"": 1},
	UnitBytes: {
		"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
	},
	UnitMbps: {"": 1, "M": 1, "G": 1000},
}

// ParseComparison reads an operator (>=, >, <=, <, = or ==; none means
// =), optional spaces and a number in unit: ">=16Gi", "16", "> 4",
// ">=10G". The errors quote s and say what was wanted:
// `"16 GB": not a size such as 16Gi or 480G`.
func ParseComparison(s string, unit Unit) (Comparison, error) {
	c := Comparison{Op: "=", Unit: unit}
	rest := s
	for _, op := range []string{">=", "<=", "==", ">", "<", "="} {
		if strings.HasPrefix(rest, op) {
			c.Op, rest = op, strings.TrimLeft(rest[len(op):], " ")
			break
		}
	}
	if c.Op == "==" {
		c.Op = "="
	}
	if rest != "" && strings.ContainsRune("<>=!~", rune(rest[0])) || strings.HasPrefix(s, "!") || strings.HasPrefix(s, "~") {
		return c, fmt.Errorf("%q: the operator is one of >=, >, <=, <, = (none means =)", s)
	}
	i := 0
	for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
		i++
	}
	num, suffix := rest[:i], rest[i:]
	v, err := strconv.ParseFloat(num, 64)
	mult, okSuffix := multipliers[unit][suffix]
	if err != nil || !okSuffix || strings.HasPrefix(num, ".") || strings.HasSuffix(num, ".") || unit == UnitCount && strings.Contains(num, ".") {
		return c, fmt.Errorf("%q: not %s", s, unitExample(unit))
	}
	c.Value, c.Suffix = v*mult, suffix
	switch {
	case unit == UnitCount && c.Value > math.MaxInt32, unit == UnitBytes && c.Value >= math.MaxInt64:
		return c, fmt.Errorf("%q: too large", s)
	case unit == UnitMbps && c.Value == 0:
		return c, fmt.Errorf("%q: a link speed is above 0", s)
	case unit == UnitMbps && c.Value > MaxMbps:
		return c, fmt.Errorf("%q: faster than any link (800G at most)", s)
	case unit == UnitMbps && suffix == "" && c.Value < 100:
		return c, fmt.Errorf("%q: %s Mb/s is no link speed: write %sG for gigabits per second (or %sM for megabits)", s, num, num, num)
	}
	return c, nil
}

func unitExample(u Unit) string {
	switch u {
	case UnitBytes:
		return "a size such as 16Gi or 480G"
	case UnitMbps:
		return "a speed such as 10G or 100M"
	}
	return "a count such as 8"
}

// Holds says x (in the unit's base) meets the comparison.
func (c Comparison) Holds(x float64) bool {
	switch c.Op {
	case ">=":
		return x >= c.Value
	case ">":
		return x > c.Value
	case "<=":
		return x <= c.Value
	case "<":
		return x < c.Value
	}
	return x == c.Value
}

// Format prints x (in the unit's base) in the comparison's suffix, to one
// decimal, or to as many as three when one would show a value that fails
// the comparison as its bound: 2147483648 bytes against ">=16Gi" is "2Gi",
// 15.97 GiB is "15.97Gi", not "16Gi".
func (c Comparison) Format(x float64) string {
	mult := multipliers[c.Unit][c.Suffix]
	if mult == 0 {
		mult = 1
	}
	v, bound := x/mult, c.Value/mult
	var s string
	for prec := 1; prec <= 3; prec++ {
		s = trimZeros(strconv.FormatFloat(v, 'f', prec, 64))
		if s != trimZeros(strconv.FormatFloat(bound, 'f', prec, 64)) || v == bound {
			break
		}
	}
	return s + c.Suffix
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Empty says e expects nothing.
func (e Expect) Empty() bool {
	return e.CPUThreads == "" && e.Memory == "" && len(e.Disks) == 0 &&
		(e.NICs == nil || e.NICs.Count == "" && e.NICs.Speed == "") && len(e.PCI) == 0
}

// Check returns every expectation inv does not meet, one line each
// ("memory: expected >=16Gi, found 2Gi"), and every expectation that does
// not parse; nil when all are met. A nil inventory meets none but an
// empty Expect: "no inventory: the agent sent none". A CPU thread count or
// a memory size of 0 is one the machine did not tell: "found unknown".
func (e Expect) Check(inv *Inventory) []string {
	if e.Empty() {
		return nil
	}
	if inv == nil {
		return []string{"no inventory: the agent sent none"}
	}
	var out []string
	fail := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	scalar := func(field, want string, unit Unit, found int64) {
		if want == "" {
			return
		}
		c, err := ParseComparison(want, unit)
		switch {
		case err != nil:
			fail("%s: %v", field, err)
		case found == 0:
			fail("%s: expected %s, found unknown", field, want)
		case !c.Holds(float64(found)):
			fail("%s: expected %s, found %s", field, want, c.Format(float64(found)))
		}
	}
	scalar("cpuThreads", e.CPUThreads, UnitCount, int64(inv.CPU.Threads))
	scalar("memory", e.Memory, UnitBytes, inv.Memory.Total)
	for i, d := range e.Disks {
		msg, err := d.check(inv.Disks)
		switch {
		case err != nil:
			fail("disks[%d].minSize: %v", i, err)
		case msg != "":
			fail("disks: %s", msg)
		}
	}
	if e.NICs != nil {
		out = append(out, e.NICs.check(inv.NICs)...)
	}
	for _, p := range e.PCI {
		if msg := p.check(inv.PCI); msg != "" {
			out = append(out, "pci: "+msg)
		}
	}
	return out
}

// check says what d misses among disks ("" when it is met).
func (d DiskExpect) check(disks []DiskInfo) (string, error) {
	size := Comparison{Op: ">=", Unit: UnitBytes, Suffix: "G"}
	if d.MinSize != "" {
		c, err := ParseComparison(d.MinSize, UnitBytes)
		if err == nil && c.Op != ">=" && c.Op != "=" {
			err = fmt.Errorf("%q: a size such as 480G, at least which a disk is", d.MinSize)
		}
		if err != nil {
			return "", err
		}
		size.Value, size.Suffix = c.Value, c.Suffix
	}
	want := max(d.Count, 1)
	found := 0
	var seen []string
	for _, k := range disks {
		ok := size.Holds(float64(k.Size)) &&
			(d.Rotational == nil || *d.Rotational == k.Rotational) &&
			(d.Transport == "" || strings.EqualFold(d.Transport, k.Transport))
		if ok {
			found++
		}
		desc := k.Name + " " + size.Format(float64(k.Size))
		if d.Transport != "" {
			desc += " " + cmp.Or(k.Transport, "transport unknown")
		}
		if d.Rotational != nil {
			desc += " " + rotational(k.Rotational)
		}
		seen = append(seen, desc)
	}
	if found >= want {
		return "", nil
	}
	what := []string{strconv.Itoa(want)}
	if d.Rotational != nil {
		what = append(what, rotational(*d.Rotational))
	}
	if d.Transport != "" {
		what = append(what, d.Transport)
	}
	if d.MinSize != "" {
		what = append(what, "of at least "+d.MinSize)
	}
	if len(seen) == 0 {
		seen = []string{"no disks"}
	}
	return fmt.Sprintf("expected %s, found %d (%s)", strings.Join(what, " "), found, strings.Join(seen, ", ")), nil
}

func rotational(r bool) string {
	if r {
		return "rotational"
	}
	return "non-rotational"
}

func (n NICExpect) check(nics []NICInfo) []string {
	count := Comparison{Op: ">=", Value: 1}
	if n.Count != "" {
		c, err := ParseComparison(n.Count, UnitCount)
		if err != nil {
			return []string{"nics.count: " + err.Error()}
		}
		count = c
	}
	var speed Comparison
	if n.Speed != "" {
		c, err := ParseComparison(n.Speed, UnitMbps)
		if err != nil {
			return []string{"nics.speed: " + err.Error()}
		}
		speed = c
	}
	found := 0
	var seen []string
	for _, nic := range nics {
		if n.Speed == "" {
			found++
			continue
		}
		if nic.Speed > 0 && speed.Holds(float64(nic.Speed)) {
			found++
		}
		s := "unknown"
		if nic.Speed > 0 {
			s = speed.Format(float64(nic.Speed))
		}
		seen = append(seen, nic.Name+" "+s)
	}
	if count.Holds(float64(found)) {
		return nil
	}
	want := cmp.Or(n.Count, ">=1")
	if n.Speed == "" {
		return []string{fmt.Sprintf("nics: expected %s, found %d", want, found)}
	}
	if len(seen) == 0 {
		seen = []string{"no NICs"}
	}
	return []string{fmt.Sprintf("nics: expected %s at %s, found %d (%s)", want, n.Speed, found, strings.Join(seen, ", "))}
}

func (p PCIExpect) check(devs []PCIInfo) string {
	if p.Vendor == "" {
		return "a vendor is needed (four hex digits such as 8086)"
	}
	found := 0
	for _, d := range devs {
		if strings.EqualFold(p.Vendor, d.Vendor) &&
			(p.Device == "" || strings.EqualFold(p.Device, d.Device)) &&
			(p.Class == "" || len(d.Class) >= len(p.Class) && strings.EqualFold(p.Class, d.Class[:len(p.Class)])) {
			found++
		}
	}
	want := max(p.Count, 1)
	if found >= want {
		return ""
	}
	id := p.Vendor
	if p.Device != "" {
		id += ":" + p.Device
	}
	if p.Class != "" {
		id += " class " + p.Class
	}
	if want > 1 {
		id = fmt.Sprintf("%d of %s", want, id)
	}
	got := "none"
	if found > 0 {
		got = strconv.Itoa(found)
	}
	return fmt.Sprintf("expected %s, found %s", id, got)
}
