package interop

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bootops/bootops/plan"
)

const csvHeader = "Serial,UUID,OSProfile,Site,Secure,RemoteUser,Metadata"

func importCSV(t *testing.T, in string, existing *plan.Plan) ([]ImportedNode, CSVSummary, error) {
	t.Helper()
	var got []ImportedNode
	im := &CSVImport{File: "b.csv", Site: "s1", Existing: existing}
	sum, err := im.Import(strings.NewReader(in), func(n ImportedNode) error {
		got = append(got, n)
		return nil
	})
	return got, sum, err
}

func TestImportCSV(t *testing.T) {
	for name, tc := range map[string]struct {
		in    string
		names []string
		data  string // the first node's file
	}{
		"bom-crlf-quoted": {
			in:    "\uFEFF" + csvHeader + ",MAC\r\nSN-1,,ubuntu-24.04-lts-generic,s1,true,u,\"line=a;rack=r1,r2\",52:54:00:00:00:01\r\nSN-2,4c4c4544-0041-3110-8042-b4c04f4e3233,,,,,,\r\n",
			names: []string{"sn-1", "sn-2"},
			data: "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: sn-1\nidentity:\n  serial: SN-1\n  mac: \"52:54:00:00:00:01\"\n" +
				"profile: ubuntu-24-04-lts-generic\nlabels:\n  line: a\n  rack: r1,r2\n",
		},
		"columns-any-order-case": {
			in:    "metadata,remoteuser,SECURE,site,osprofile,uuid,serial\n\"{\"\"k\"\":\"\"v\"\"}\",,,,,,X1\n",
			names: []string{"x1"},
			data:  "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: x1\nidentity:\n  serial: X1\nlabels:\n  k: v\n",
		},
		"sample-ampersand": {
			in:    csvHeader + "\nSN0A1B2C3D,4c4c4544-0041-3110-8042-b4c04f4e3232,microvisor-standalone,s1,false,,line=a&rack=r1\n",
			names: []string{"sn0a1b2c3d"},
			data: "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: sn0a1b2c3d\nidentity:\n  serial: SN0A1B2C3D\n  uuid: 4c4c4544-0041-3110-8042-b4c04f4e3232\n" +
				"profile: microvisor-standalone\nlabels:\n  line: a\n  rack: r1\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, _, err := importCSV(t, tc.in, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, n := range got {
				names = append(names, n.Name)
			}
			if strings.Join(names, " ") != strings.Join(tc.names, " ") {
				t.Errorf("names = %v, want %v", names, tc.names)
			}
			if string(got[0].Data) != tc.data {
				t.Errorf("data:\n%s\nwant:\n%s", got[0].Data, tc.data)
			}
		})
	}
}

func TestImportCSVErrors(t *testing.T) {
	existing := &plan.Plan{Profiles: []*plan.Profile{{Name: "known"}}, Sites: []*plan.Site{{Name: "s1", Nodes: []*plan.Node{
		{Name: "old", Identity: plan.Identity{Serial: "OLD-1", MACs: []string{"52:54:00:00:00:09"}}, Source: "sites/s1/nodes/old.yaml:1"},
	}}}}
	for name, tc := range map[string]struct {
		in       string
		existing *plan.Plan
		want     string
	}{
		"missing-columns": {
			in:   "Serial,UUID,Site\nA,,\n",
			want: "b.csv:1: missing columns: OSProfile, Secure, RemoteUser, Metadata (header must name Serial,UUID,OSProfile,Site,Secure,RemoteUser,Metadata, MAC optional)",
		},
		"bad-values": {
			in: csvHeader + ",MAC\nA B,,,,,,,\n,not-a-uuid,,,,,,\n,,,,,,,52:54:00\n,,,,,,,\nC,,,other,,,,\nD,,,,,,novalue,\n",
			want: "b.csv:2: Serial \"A B\": want 1 to 64 characters without spaces\n" +
				"b.csv:3: UUID \"not-a-uuid\": want an SMBIOS UUID such as 01020304-0506-0708-090a-0b0c0d0e0f10\n" +
				"b.csv:4: MAC \"52:54:00\": want a MAC address such as 52:54:00:12:34:56\n" +
				"b.csv:5: no Serial, UUID or MAC: a node needs at least one\n" +
				"b.csv:6: Site \"other\" differs from --site s1: import each site's rows separately\n" +
				"b.csv:7: Metadata: \"novalue\": want key=value pairs separated by '&' or ';'",
		},
		"duplicates-in-file": {
			in: csvHeader + ",MAC\nA,,,,,,,52:54:00:00:00:01\nB,,,,,,,52-54-00-00-00-01\na,,,,,,,\n",
			want: "b.csv:3: mac 52-54-00-00-00-01 also on line 2\n" +
				"b.csv:4: name a also on line 2\nb.csv:4: serial a also on line 2",
		},
		"against-repo": {
			in:       csvHeader + ",MAC\nold-1,,,,,,,\nN,,,,,,,52:54:00:00:00:09\nold,,,,,,,\nP,,unknown,,,,,\nQ,,known,,,,,\n",
			existing: existing,
			want: "b.csv:2: serial old-1 also on node old at sites/s1/nodes/old.yaml:1\n" +
				"b.csv:3: mac 52:54:00:00:00:09 also on node old at sites/s1/nodes/old.yaml:1\n" +
				"b.csv:4: node old already exists at sites/s1/nodes/old.yaml:1 with other content (edit or remove it there)\n" +
				"b.csv:5: OSProfile \"unknown\": no profile \"unknown\" in the repository (import it with `bootops import eim-profile`)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, _, err := importCSV(t, tc.in, tc.existing)
			var list ImportErrors
			if !errors.As(err, &list) {
				t.Fatalf("err = %v, want ImportErrors", err)
			}
			if err.Error() != tc.want {
				t.Errorf("errors:\n%s\nwant:\n%s", err, tc.want)
			}
			if len(got) > 1 {
				t.Errorf("emitted %d nodes after an error", len(got))
			}
		})
	}
}

func TestImportCSVSample(t *testing.T) {
	f, err := os.Open("testdata/eim/bulk-import.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	im := &CSVImport{File: "bulk-import.csv", Site: "warehouse-1"}
	sum, err := im.Import(f, nil)
	// The sample's last row is in another site.
	if err == nil || !strings.Contains(err.Error(), `bulk-import.csv:5: Site "warehouse-2" differs`) {
		t.Errorf("err = %v", err)
	}
	if sum.Ignored["Secure"] != 3 || sum.Ignored["RemoteUser"] != 1 {
		t.Errorf("ignored = %v", sum.Ignored)
	}
}

func TestImportEIMProfileMissing(t *testing.T) {
	in := "appVersion: apps/v1\nspec:\n  type: OS_TYPE_MUTABLE\n  profileName: p\n  osImageVersion: 1\n"
	_, err := ImportEIMProfile([]byte(in), "p.yaml", "https://rs.example")
	want := "p.yaml:3: spec.osImageUrl: missing\np.yaml:3: spec.osImageSha256: missing"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

// The EIM-format samples in testdata/eim: a relative image path resolved
// against the release service, a folded URL kept whole, and each field
// without an equivalent named.
func TestImportEIMProfileSamples(t *testing.T) {
	for file, want := range map[string]struct {
		name, url string
		ignored   []string
	}{
		"os-profile-microvisor-standalone.yaml": {
			"microvisor-standalone",
			"https://rs.example/files-edge/repository/immutable/edge-ro-1.4.20261001.0042.raw.gz",
			[]string{"metadata.standalone-node", "provider", "osPackageManifestURL", "osExistingCvesURL", "osFixedCvesURL", "securityFeature", "platformBundle"},
		},
		"os-profile-ubuntu-24.04-lts-generic.yaml": {
			"ubuntu-24-04-lts-generic",
			"https://images.example.test/ubuntu/noble/20261001/noble-server-cloudimg-amd64.img",
			[]string{"metadata.release", "metadata.version", "provider", "osPackageManifestURL", "securityFeature", "platformBundle"},
		},
	} {
		data, err := os.ReadFile(filepath.Join("testdata/eim", file))
		if err != nil {
			t.Fatal(err)
		}
		p, err := ImportEIMProfile(data, file, "https://rs.example")
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if p.Name != want.name || !strings.Contains(string(p.Data), "url: "+want.url+"\n") {
			t.Errorf("%s: name %q, profile:\n%s", file, p.Name, p.Data)
		}
		if !slices.Equal(p.Ignored, want.ignored) {
			t.Errorf("%s: ignored %q, want %q", file, p.Ignored, want.ignored)
		}
	}
}
