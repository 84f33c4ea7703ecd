package plan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestParseComparison(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		unit Unit
		want Comparison
	}{
		"count, no operator":     {"16", UnitCount, Comparison{Op: "=", Value: 16}},
		"count >=":               {">=8", UnitCount, Comparison{Op: ">=", Value: 8}},
		"count >":                {">4", UnitCount, Comparison{Op: ">", Value: 4}},
		"count <=":               {"<=64", UnitCount, Comparison{Op: "<=", Value: 64}},
		"count <":                {"<64", UnitCount, Comparison{Op: "<", Value: 64}},
		"count ==":               {"==2", UnitCount, Comparison{Op: "=", Value: 2}},
		"count =":                {"=2", UnitCount, Comparison{Op: "=", Value: 2}},
		"spaces after operator":  {">= 8", UnitCount, Comparison{Op: ">=", Value: 8}},
		"size Gi":                {">=16Gi", UnitBytes, Comparison{Op: ">=", Value: 16 << 30, Unit: UnitBytes, Suffix: "Gi"}},
		"size G, decimals":       {">=15.5G", UnitBytes, Comparison{Op: ">=", Value: 15.5e9, Unit: UnitBytes, Suffix: "G"}},
		"size Ti, decimals":      {"1.5Ti", UnitBytes, Comparison{Op: "=", Value: 1.5 * (1 << 40), Unit: UnitBytes, Suffix: "Ti"}},
		"size Ki":                {"<4Ki", UnitBytes, Comparison{Op: "<", Value: 4096, Unit: UnitBytes, Suffix: "Ki"}},
		"size Mi":                {">=512Mi", UnitBytes, Comparison{Op: ">=", Value: 512 << 20, Unit: UnitBytes, Suffix: "Mi"}},
		"size K":                 {">=4K", UnitBytes, Comparison{Op: ">=", Value: 4000, Unit: UnitBytes, Suffix: "K"}},
		"size M":                 {">=4M", UnitBytes, Comparison{Op: ">=", Value: 4e6, Unit: UnitBytes, Suffix: "M"}},
		"size T":                 {">=4T", UnitBytes, Comparison{Op: ">=", Value: 4e12, Unit: UnitBytes, Suffix: "T"}},
		"size in bytes":          {">=1048576", UnitBytes, Comparison{Op: ">=", Value: 1 << 20, Unit: UnitBytes}},
		"speed G":                {">=10G", UnitMbps, Comparison{Op: ">=", Value: 10000, Unit: UnitMbps, Suffix: "G"}},
		"speed G, decimals":      {">=2.5G", UnitMbps, Comparison{Op: ">=", Value: 2500, Unit: UnitMbps, Suffix: "G"}},
		"speed M":                {">=100M", UnitMbps, Comparison{Op: ">=", Value: 100, Unit: UnitMbps, Suffix: "M"}},
		"speed M, low":           {">=10M", UnitMbps, Comparison{Op: ">=", Value: 10, Unit: UnitMbps, Suffix: "M"}},
		"speed in Mb/s":          {">=1000", UnitMbps, Comparison{Op: ">=", Value: 1000, Unit: UnitMbps}},
		"speed in Mb/s, lowest":  {"100", UnitMbps, Comparison{Op: "=", Value: 100, Unit: UnitMbps}},
		"speed, fastest":         {"800G", UnitMbps, Comparison{Op: "=", Value: 800000, Unit: UnitMbps, Suffix: "G"}},
		"count, as large as can": {"2147483647", UnitCount, Comparison{Op: "=", Value: 2147483647}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseComparison(tc.in, tc.unit)
			if err != nil {
				t.Fatalf("ParseComparison(%q): %v", tc.in, err)
			}
			tc.want.Unit = tc.unit
			if got != tc.want {
				t.Errorf("ParseComparison(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseComparisonErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		unit Unit
		want string
	}{
		"size with a space and GB":       {"16 GB", UnitBytes, `"16 GB": not a size such as 16Gi or 480G`},
		"size GB":                        {"16GB", UnitBytes, `"16GB": not a size such as 16Gi or 480G`},
		"size lower-case gi":             {"16gi", UnitBytes, `"16gi": not a size such as 16Gi or 480G`},
		"size Pi":                        {"1Pi", UnitBytes, `"1Pi": not a size such as 16Gi or 480G`},
		"size, no number":                {">=Gi", UnitBytes, `">=Gi": not a size such as 16Gi or 480G`},
		"size, a leading dot":            {".5Gi", UnitBytes, `".5Gi": not a size such as 16Gi or 480G`},
		"size, a trailing dot":           {"5.Gi", UnitBytes, `"5.Gi": not a size such as 16Gi or 480G`},
		"size, two dots":                 {"1.5.1Gi", UnitBytes, `"1.5.1Gi": not a size such as 16Gi or 480G`},
		"size, an exponent":              {"1e9", UnitBytes, `"1e9": not a size such as 16Gi or 480G`},
		"size, negative":                 {">=-1Gi", UnitBytes, `">=-1Gi": not a size such as 16Gi or 480G`},
		"size, a leading space":          {" >=1Gi", UnitBytes, `" >=1Gi": not a size such as 16Gi or 480G`},
		"size, too large":                {"9000000Ti", UnitBytes, `"9000000Ti": too large`},
		"empty":                          {"", UnitCount, `"": not a count such as 8`},
		"count with a fraction":          {">=8.5", UnitCount, `">=8.5": not a count such as 8`},
		"count with a unit":              {">=8Gi", UnitCount, `">=8Gi": not a count such as 8`},
		"count, too large":               {"2147483648", UnitCount, `"2147483648": too large`},
		"operator =>":                    {"=>8", UnitCount, `"=>8": the operator is one of >=, >, <=, <, = (none means =)`},
		"operator !=":                    {"!=8", UnitCount, `"!=8": the operator is one of >=, >, <=, <, = (none means =)`},
		"operator >>":                    {">>8", UnitCount, `">>8": the operator is one of >=, >, <=, <, = (none means =)`},
		"operator ~":                     {"~8", UnitCount, `"~8": the operator is one of >=, >, <=, <, = (none means =)`},
		"operator <>":                    {"<>8", UnitCount, `"<>8": the operator is one of >=, >, <=, <, = (none means =)`},
		"speed Gb":                       {">=10Gb", UnitMbps, `">=10Gb": not a speed such as 10G or 100M`},
		"speed Gi":                       {">=10Gi", UnitMbps, `">=10Gi": not a speed such as 10G or 100M`},
		"speed T":                        {">=1T", UnitMbps, `">=1T": not a speed such as 10G or 100M`},
		"speed 0":                        {">=0G", UnitMbps, `">=0G": a link speed is above 0`},
		"speed over 800G":                {">=801G", UnitMbps, `">=801G": faster than any link (800G at most)`},
		"speed without a unit, too fast": {">=10000000", UnitMbps, `">=10000000": faster than any link (800G at most)`},
		"speed without a unit, too slow": {">=10", UnitMbps, `">=10": 10 Mb/s is no link speed: write 10G for gigabits per second (or 10M for megabits)`},
		"speed without a unit, 99":       {"99", UnitMbps, `"99": 99 Mb/s is no link speed: write 99G for gigabits per second (or 99M for megabits)`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseComparison(tc.in, tc.unit)
			if err == nil || err.Error() != tc.want {
				t.Errorf("ParseComparison(%q) error = %v, want %s", tc.in, err, tc.want)
			}
		})
	}
}

func TestComparisonHolds(t *testing.T) {
	for name, tc := range map[string]struct {
		cmp, unit string
		x         float64
		holds     bool
	}{
		">= at the bound":           {">=16Gi", "bytes", 16 << 30, true},
		">= a byte below":           {">=16Gi", "bytes", 16<<30 - 1, false},
		"> at the bound":            {">4", "count", 4, false},
		"> one above":               {">4", "count", 5, true},
		"<= at the bound":           {"<=64", "count", 64, true},
		"<= one above":              {"<=64", "count", 65, false},
		"< at the bound":            {"<64", "count", 64, false},
		"< one below":               {"<64", "count", 63, true},
		"= at the value":            {"16", "count", 16, true},
		"= one off":                 {"16", "count", 15, false},
		"decimal size at the bound": {">=15.5G", "bytes", 15.5e9, true},
		"decimal size below":        {">=15.5G", "bytes", 15.5e9 - 1, false},
		"speed 10G against 10000":   {">=10G", "speed", 10000, true},
		"speed 10G against 9999":    {">=10G", "speed", 9999, false},
		"speed 2.5G against 2500":   {"2.5G", "speed", 2500, true},
	} {
		t.Run(name, func(t *testing.T) {
			u := map[string]Unit{"count": UnitCount, "bytes": UnitBytes, "speed": UnitMbps}[tc.unit]
			c, err := ParseComparison(tc.cmp, u)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Holds(tc.x); got != tc.holds {
				t.Errorf("%s holds for %v = %v, want %v", tc.cmp, tc.x, got, tc.holds)
			}
		})
	}
}

func TestComparisonFormat(t *testing.T) {
	for name, tc := range map[string]struct {
		cmp  string
		unit Unit
		x    float64
		want string
	}{
		"whole":                         {">=16Gi", UnitBytes, 2 << 30, "2Gi"},
		"one decimal":                   {">=16Gi", UnitBytes, 1.94 * (1 << 30), "1.9Gi"},
		"just below the bound":          {">=16Gi", UnitBytes, 15.97 * (1 << 30), "15.97Gi"},
		"a hair below the bound":        {">=16Gi", UnitBytes, 16<<30 - 1, "16Gi"},
		"decimal unit":                  {">=480G", UnitBytes, 256 << 30, "274.9G"},
		"bytes":                         {">=1000000", UnitBytes, 999999, "999999"},
		"count":                         {">=8", UnitCount, 2, "2"},
		"speed in G":                    {">=10G", UnitMbps, 1000, "1G"},
		"speed in Mb/s":                 {">=1000", UnitMbps, 100, "100"},
		"above the bound, one decimal":  {"<=1Gi", UnitBytes, 1.04 * (1 << 30), "1.04Gi"},
		"exactly the bound of a strict": {">1Gi", UnitBytes, 1 << 30, "1Gi"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := ParseComparison(tc.cmp, tc.unit)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Format(tc.x); got != tc.want {
				t.Errorf("%s: Format(%v) = %q, want %q", tc.cmp, tc.x, got, tc.want)
			}
		})
	}
}

// testInventory is a small server: 16 threads, 62.5 GiB seen of 64 GiB,
// two NVMe disks and a SATA disk, two 10G NICs and a 1G one, an Intel
// X710 and a GPU.
func testInventory() *Inventory {
	return &Inventory{
		CPU:    CPUInfo{Threads: 16},
		Memory: MemoryInfo{Total: 62.5 * (1 << 30)},
		Disks: []DiskInfo{
			{Name: "nvme0n1", Size: 960e9, Transport: "nvme"},
			{Name: "nvme1n1", Size: 960e9, Transport: "nvme"},
			{Name: "sda", Size: 4e12, Rotational: true, Transport: "sata"},
		},
		NICs: []NICInfo{
			{Name: "eno1", Speed: 10000, Link: "up"},
			{Name: "eno2", Speed: 10000, Link: "up"},
			{Name: "eno3", Speed: 1000, Link: "up"},
			{Name: "eno4", Link: "down"},
		},
		PCI: []PCIInfo{
			{Address: "0000:01:00.0", Vendor: "8086", Device: "1572", Class: "0200"},
			{Address: "0000:01:00.1", Vendor: "8086", Device: "1572", Class: "0200"},
			{Address: "0000:02:00.0", Vendor: "10de", Device: "2204", Class: "0300"},
		},
	}
}

func TestCheck(t *testing.T) {
	yes, no := true, false
	met := Expect{
		CPUThreads: ">=16",
		Memory:     ">=62Gi",
		Disks: []DiskExpect{
			{MinSize: "900G", Count: 2, Rotational: &no, Transport: "nvme"},
			{MinSize: "3.5Ti", Rotational: &yes},
			{Transport: "SATA"},
		},
		NICs: &NICExpect{Count: ">=2", Speed: ">=10G"},
		PCI:  []PCIExpect{{Vendor: "8086", Device: "1572", Count: 2}, {Vendor: "10DE", Class: "03"}, {Vendor: "10de", Class: "0300"}},
	}
	for name, tc := range map[string]struct {
		e    Expect
		inv  *Inventory
		want []string
	}{
		"nothing expected":                 {Expect{}, testInventory(), nil},
		"nothing expected, no inventory":   {Expect{NICs: &NICExpect{}}, nil, nil},
		"all met":                          {met, testInventory(), nil},
		"no inventory":                     {met, nil, []string{"no inventory: the agent sent none"}},
		"cpuThreads":                       {Expect{CPUThreads: ">=32"}, testInventory(), []string{"cpuThreads: expected >=32, found 16"}},
		"cpuThreads, exact":                {Expect{CPUThreads: "8"}, testInventory(), []string{"cpuThreads: expected 8, found 16"}},
		"cpuThreads, unknown":              {Expect{CPUThreads: "<=64"}, &Inventory{}, []string{"cpuThreads: expected <=64, found unknown"}},
		"memory as written on the invoice": {Expect{Memory: ">=64Gi"}, testInventory(), []string{"memory: expected >=64Gi, found 62.5Gi"}},
		"memory, decimal":                  {Expect{Memory: ">=128G"}, testInventory(), []string{"memory: expected >=128G, found 67.1G"}},
		"memory, small":                    {Expect{Memory: ">=16Gi"}, &Inventory{Memory: MemoryInfo{Total: 2 << 30}}, []string{"memory: expected >=16Gi, found 2Gi"}},
		"memory, not a size":               {Expect{Memory: "16 GB"}, testInventory(), []string{`memory: "16 GB": not a size such as 16Gi or 480G`}},
		"disks, too few large":             {Expect{Disks: []DiskExpect{{MinSize: "480G", Count: 4}}}, testInventory(), []string{"disks: expected 4 of at least 480G, found 3 (nvme0n1 960G, nvme1n1 960G, sda 4000G)"}},
		"disks, too small": {
			Expect{Disks: []DiskExpect{{MinSize: "480G", Count: 2}}},
			&Inventory{Disks: []DiskInfo{{Name: "vda", Size: 256 << 30}, {Name: "vdb", Size: 512 << 30}}},
			[]string{"disks: expected 2 of at least 480G, found 1 (vda 274.9G, vdb 549.8G)"},
		},
		"disks, none":                        {Expect{Disks: []DiskExpect{{MinSize: "1Ti"}}}, &Inventory{}, []string{"disks: expected 1 of at least 1Ti, found 0 (no disks)"}},
		"disks, rotational":                  {Expect{Disks: []DiskExpect{{Count: 2, Rotational: &yes}}}, testInventory(), []string{"disks: expected 2 rotational, found 1 (nvme0n1 960G non-rotational, nvme1n1 960G non-rotational, sda 4000G rotational)"}},
		"disks, transport":                   {Expect{Disks: []DiskExpect{{MinSize: "1T", Rotational: &no, Transport: "sas"}}}, testInventory(), []string{"disks: expected 1 non-rotational sas of at least 1T, found 0 (nvme0n1 0.96T nvme non-rotational, nvme1n1 0.96T nvme non-rotational, sda 4T sata rotational)"}},
		"disks, bad minSize":                 {Expect{Disks: []DiskExpect{{MinSize: "1T"}, {MinSize: "<1T"}}}, testInventory(), []string{`disks[1].minSize: "<1T": a size such as 480G, at least which a disk is`}},
		"nics, count":                        {Expect{NICs: &NICExpect{Count: ">=6"}}, testInventory(), []string{"nics: expected >=6, found 4"}},
		"nics, one":                          {Expect{NICs: &NICExpect{Count: ">=2"}}, &Inventory{NICs: []NICInfo{{Name: "ens3"}}}, []string{"nics: expected >=2, found 1"}},
		"nics, speed":                        {Expect{NICs: &NICExpect{Count: ">=3", Speed: ">=10G"}}, testInventory(), []string{"nics: expected >=3 at >=10G, found 2 (eno1 10G, eno2 10G, eno3 1G, eno4 unknown)"}},
		"nics, speed, count defaults to >=1": {Expect{NICs: &NICExpect{Speed: ">=25G"}}, testInventory(), []string{"nics: expected >=1 at >=25G, found 0 (eno1 10G, eno2 10G, eno3 1G, eno4 unknown)"}},
		"nics, speed, none":                  {Expect{NICs: &NICExpect{Speed: ">=1G"}}, &Inventory{}, []string{"nics: expected >=1 at >=1G, found 0 (no NICs)"}},
		"nics, bad speed":                    {Expect{NICs: &NICExpect{Speed: "10"}}, testInventory(), []string{`nics.speed: "10": 10 Mb/s is no link speed: write 10G for gigabits per second (or 10M for megabits)`}},
		"pci, absent":                        {Expect{PCI: []PCIExpect{{Vendor: "15b3", Device: "1017"}}}, testInventory(), []string{"pci: expected 15b3:1017, found none"}},
		"pci, too few":                       {Expect{PCI: []PCIExpect{{Vendor: "8086", Device: "1572", Count: 4}}}, testInventory(), []string{"pci: expected 4 of 8086:1572, found 2"}},
		"pci, class":                         {Expect{PCI: []PCIExpect{{Vendor: "10de", Class: "0302"}}}, testInventory(), []string{"pci: expected 10de class 0302, found none"}},
		"pci, no inventory":                  {Expect{PCI: []PCIExpect{{Vendor: "8086", Device: "1572"}}}, &Inventory{}, []string{"pci: expected 8086:1572, found none"}},
		"every kind unmet, in order": {
			Expect{CPUThreads: ">=8", Memory: ">=16Gi", Disks: []DiskExpect{{MinSize: "480G", Count: 2}}, NICs: &NICExpect{Count: ">=2"}, PCI: []PCIExpect{{Vendor: "8086", Device: "1572"}}},
			&Inventory{CPU: CPUInfo{Threads: 2}, Memory: MemoryInfo{Total: 2 << 30}, Disks: []DiskInfo{{Name: "vda", Size: 256 << 30}}, NICs: []NICInfo{{Name: "ens3", Speed: 1000}}},
			[]string{
				"cpuThreads: expected >=8, found 2",
				"memory: expected >=16Gi, found 2Gi",
				"disks: expected 2 of at least 480G, found 0 (vda 274.9G)",
				"nics: expected >=2, found 1",
				"pci: expected 8086:1572, found none",
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := tc.e.Check(tc.inv)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Check:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tc.want, "\n     "))
			}
		})
	}
}

func TestExpectEmptyAndJSON(t *testing.T) {
	if !(Expect{}).Empty() || !(Expect{NICs: &NICExpect{}}).Empty() {
		t.Error("an Expect with nothing in it is not Empty")
	}
	if (Expect{Disks: []DiskExpect{{}}}).Empty() || (Expect{NICs: &NICExpect{Speed: ">=1G"}}).Empty() {
		t.Error("an Expect with a disk or a NIC speed is Empty")
	}
	no := false
	b, err := json.Marshal(Expect{Memory: ">=15Gi", Disks: []DiskExpect{{MinSize: "480G", Rotational: &no}}, PCI: []PCIExpect{{Vendor: "8086"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"memory":"\u003e=15Gi","disks":[{"minSize":"480G","rotational":false}],"pci":[{"vendor":"8086"}]}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
}
