package compiler

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bootops/bootops/internal/testutil"
	"github.com/bootops/bootops/plan"
)

// pyYAMLLoad reads each document with PyYAML's safe_load, as cloud-init
// does, and returns what it read as JSON-like values. What JSON cannot
// hold (a date, a non-string key, inf, nan) becomes a "!type:value"
// string, so it can never equal the string that was meant.
const pyYAMLLoad = `
import json, sys, yaml
def conv(o):
    if isinstance(o, dict):
        return {(k if isinstance(k, str) else "!%s:%r" % (type(k).__name__, k)): conv(v) for k, v in o.items()}
    if isinstance(o, list):
        return [conv(v) for v in o]
    if o is None or isinstance(o, (bool, str, int)):
        return o
    if isinstance(o, float) and o == o and abs(o) != float("inf"):
        return o
    return "!%s:%r" % (type(o).__name__, o)
out = []
for doc in json.load(sys.stdin):
    try:
        out.append({"v": conv(yaml.safe_load(doc))})
    except Exception as e:
        out.append({"err": str(e)})
json.dump(out, sys.stdout)
`

// debianPython is the interpreter whose yaml module is Debian's
// python3-yaml (make test installs it, see LAB_DEBS).
func debianPython(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			t.Fatal("python3 not found: install python3-yaml (make lab-deps)")
		}
	}
	if out, err := exec.Command(py, "-c", "import yaml").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import yaml: install python3-yaml (make lab-deps): %v\n%s", py, err, out)
	}
	return py
}

// TestCloudInitReadsWhatWasMeant renders every valid golden case and reads
// each node's meta-data, user-data and network-config back with PyYAML
// (YAML 1.1, what cloud-init uses): every value must be what bootops
// meant, a string staying a string (hostname 0042 is not 34, yes is not
// True, 2001-12-14 is not a date).
func TestCloudInitReadsWhatWasMeant(t *testing.T) {
	testutil.Slow(t)
	py := debianPython(t)
	base := readTxtar(t, "testdata/_base.txtar")
	dirs, err := filepath.Glob("testdata/*/repo.txtar")
	if err != nil {
		t.Fatal(err)
	}
	type doc struct {
		name string
		text string
		want any
	}
	var docs []doc
	cases := 0
	for _, p := range dirs {
		dir := filepath.Dir(p)
		c := newCompiler(t)
		pl, err := c.Compile(goldenFS(t, base, dir))
		if err != nil {
			continue // an invalid case: nothing is rendered
		}
		cases++
		r := c.last.repo
		sites, profiles := map[string]*plan.Site{}, map[string]*plan.Profile{}
		for _, s := range pl.Sites {
			sites[s.Name] = s
		}
		for _, pr := range pl.Profiles {
			profiles[pr.Name] = pr
		}
		objs := map[string]*nodeObj{}
		for _, n := range r.nodes {
			objs[n.site+"/"+n.name] = n
		}
		for _, s := range pl.Sites {
			for _, n := range s.Nodes {
				name := dir + ": " + s.Name + "/" + n.Name + "/"
				pr := profiles[n.Profile]
				ci := r.cloudConfig(n, objs[s.Name+"/"+n.Name].v.get("cloudInit"), pr, renderVars(n, s, pr))
				docs = append(docs,
					doc{name + "user-data", n.Artifacts.UserData, normalise(t, ci.toAny())},
					doc{name + "meta-data", n.Artifacts.MetaData, map[string]any{
						"instance-id": n.Name + "-" + itoa(n.Reprovision), "local-hostname": n.Hostname}},
					doc{name + "network-config", n.Artifacts.NetworkConfig, normalise(t, wantNetworkConfig(n, s))},
				)
			}
		}
	}
	if cases < 8 || len(docs) < 60 {
		t.Fatalf("only %d valid cases, %d documents", cases, len(docs))
	}
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.text
	}
	in, _ := json.Marshal(texts)
	cmd := exec.Command(py, "-c", pyYAMLLoad)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var got []struct {
		V   any    `json:"v"`
		Err string `json:"err"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(docs) {
		t.Fatalf("python output: %v (%d of %d)", err, len(got), len(docs))
	}
	for i, d := range docs {
		if got[i].Err != "" {
			t.Errorf("%s: PyYAML: %s\n%s", d.name, got[i].Err, d.text)
			continue
		}
		if !reflect.DeepEqual(got[i].V, d.want) {
			g, _ := json.Marshal(got[i].V)
			w, _ := json.Marshal(d.want)
			t.Errorf("%s: PyYAML reads\n  %s\nmeant\n  %s\nfrom:\n%s", d.name, g, w, d.text)
		}
	}
}

// wantNetworkConfig is what networkConfig means to say: per family the
// site has, a reserved address or DHCP (IPv6: router advertisements, and
// DHCPv6 when the site hands out addresses with it).
func wantNetworkConfig(n *plan.Node, s *plan.Site) any {
	if n.Network != nil {
		return wantStaticNetwork(n)
	}
	eth := map[string]any{}
	if s.Network.ServerAddress != "" {
		eth["dhcp4"] = n.IP == ""
	}
	if v6 := s.Network.IPv6; v6 != nil {
		eth["accept-ra"] = true
		eth["dhcp6"] = n.IPv6 == "" && v6.DHCP == plan.DHCPReservation
	}
	if len(n.Identity.MACs) > 0 {
		eth["match"] = map[string]any{"macaddress": n.Identity.MACs[0]}
	} else {
		eth["match"] = map[string]any{"name": "e*"}
	}
	var addrs, dns []any
	if n.IP != "" {
		prefix := netip.MustParsePrefix(s.Network.Subnet)
		addrs = append(addrs, n.IP+"/"+itoa(prefix.Bits()))
		if s.Network.Gateway != "" {
			eth["gateway4"] = s.Network.Gateway
		}
		for _, d := range s.Network.DNS {
			dns = append(dns, d)
		}
	}
	if n.IPv6 != "" {
		prefix := netip.MustParsePrefix(s.Network.IPv6.Prefix)
		addrs = append(addrs, n.IPv6+"/"+itoa(prefix.Bits()))
		for _, d := range s.Network.IPv6.DNS {
			dns = append(dns, d)
		}
	}
	if addrs != nil {
		eth["addresses"] = addrs
	}
	if dns != nil {
		eth["nameservers"] = map[string]any{"addresses": dns}
	}
	return map[string]any{"version": 2, "ethernets": map[string]any{"primary": eth}}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// wantStaticNetwork is what a node's own static network means: the NIC
// (by network.interface, else its first MAC) without DHCP, the address,
// route and name servers on it, or on its VLAN.
func wantStaticNetwork(n *plan.Node) any {
	nn := n.Network
	mac := nn.Interface
	if mac == "" && len(n.Identity.MACs) > 0 {
		mac = n.Identity.MACs[0]
	}
	eth := map[string]any{"dhcp4": false, "match": map[string]any{"name": "e*"}}
	if mac != "" {
		eth["match"] = map[string]any{"macaddress": mac}
	}
	where := eth
	doc := map[string]any{"version": 2, "ethernets": map[string]any{"primary": eth}}
	if nn.VLAN != 0 {
		where = map[string]any{"id": nn.VLAN, "link": "primary", "dhcp4": false}
		doc["vlans"] = map[string]any{"vlan" + itoa(nn.VLAN): where}
	}
	where["addresses"] = []any{nn.Address}
	if nn.Gateway != "" {
		where["gateway4"] = nn.Gateway
	}
	if len(nn.DNS) > 0 {
		var dns []any
		for _, d := range nn.DNS {
			dns = append(dns, d)
		}
		where["nameservers"] = map[string]any{"addresses": dns}
	}
	return doc
}
