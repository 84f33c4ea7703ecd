package interop

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"text/template"

	"github.com/rogpeppe/go-internal/diff"
	"github.com/rogpeppe/go-internal/txtar"
	"go.yaml.in/yaml/v3"

	"github.com/bootops/bootops/compiler"
	"github.com/bootops/bootops/plan"
)

const tinkCase = "testdata/tinkerbell-export"

var update = flag.Bool("update", false, "rewrite the golden files of the export")

// baseTxtar is the compiler's base repository, which its golden cases are
// laid over too.
const baseTxtar = "../compiler/testdata/_base.txtar"

// txtarFiles reads a txtar archive's files.
func txtarFiles(t testing.TB, name string) []txtar.File {
	t.Helper()
	a, err := txtar.ParseFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return a.Files
}

// tinkPlan compiles testdata/tinkerbell-export laid over the base.
func tinkPlan(t *testing.T) *plan.Plan {
	t.Helper()
	fsys := fstest.MapFS{}
	for _, name := range []string{baseTxtar, filepath.Join(tinkCase, "repo.txtar")} {
		for _, f := range txtarFiles(t, name) {
			fsys[f.Name] = &fstest.MapFile{Data: f.Data}
		}
	}
	return compileFS(t, fsys)
}

func compileFS(t *testing.T, fsys fs.FS) *plan.Plan {
	t.Helper()
	c, err := compiler.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Compile(fsys)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func exportText(x *TinkerbellExport) string {
	var b strings.Builder
	for _, f := range x.Files {
		fmt.Fprintf(&b, "-- %s --\n%s", f.Path, f.Data)
	}
	b.WriteString("-- skipped --\n")
	for _, s := range x.Skipped {
		b.WriteString(s.String() + "\n")
	}
	return b.String()
}

// TestTinkerbellGolden compares the export of the case's site edge with
// export.txt (go test ./interop -run TestTinkerbellGolden -update).
func TestTinkerbellGolden(t *testing.T) {
	p := tinkPlan(t)
	x, err := ExportTinkerbell(p, "edge", TinkerbellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := exportText(x)
	want := filepath.Join(tinkCase, "export.txt")
	if *update {
		if err := os.WriteFile(want, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatalf("%v (run go test ./interop -run TestTinkerbellGolden -update)", err)
	}
	if got != string(b) {
		t.Errorf("export differs from %s:\n%s", want, diff.Diff(want, b, "export", []byte(got)))
	}
	// A second compile and export give the same bytes.
	x2, err := ExportTinkerbell(tinkPlan(t), "edge", TinkerbellOptions{})
	if err != nil || exportText(x2) != got {
		t.Errorf("second export differs (err %v)", err)
	}
}

// renderTemplate does what Tinkerbell's workflow controller does with a
// Template: text/template over the Workflow's hardwareMap, then YAML.
func renderTemplate(t *testing.T, data string, hardwareMap map[string]string) map[string]any {
	t.Helper()
	tpl, err := template.New("workflow").Option("missingkey=error").Parse(data)
	if err != nil {
		t.Fatalf("parse template: %v\n%s", err, data)
	}
	vars := map[string]any{}
	for k, v := range hardwareMap {
		vars[k] = v
	}
	var b bytes.Buffer
	if err := tpl.Execute(&b, vars); err != nil {
		t.Fatalf("render template: %v", err)
	}
	var out map[string]any
	if err := yaml.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("rendered template is not YAML: %v\n%s", err, b.String())
	}
	return out
}

// tinkDocs parses the export's files into objects by kind and name.
func tinkDocs(t *testing.T, x *TinkerbellExport) map[string]map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]map[string]any{}
	for _, f := range x.Files {
		for _, doc := range yamlDocs(t, f.Path, f.Data) {
			kind := doc["kind"].(string)
			if out[kind] == nil {
				out[kind] = map[string]map[string]any{}
			}
			name := doc["metadata"].(map[string]any)["name"].(string)
			out[kind][name] = doc
		}
	}
	return out
}

func yamlDocs(t *testing.T, name string, data []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return docs
			}
			t.Fatalf("%s: %v", name, err)
		}
		docs = append(docs, doc)
	}
}

func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestTinkerbellMapping renders every node's Template with its hardwareMap
// and checks what each bootops action became, value by value.
func TestTinkerbellMapping(t *testing.T) {
	p := tinkPlan(t)
	x, err := ExportTinkerbell(p, "edge", TinkerbellOptions{})
	if err != nil {
		t.Fatal(err)
	}
	docs := tinkDocs(t, x)
	if len(docs["Hardware"]) != 2 || len(docs["Workflow"]) != 2 || len(docs["Template"]) != 1 {
		t.Fatalf("got %d Hardware, %d Workflow, %d Template; want 2, 2, 1", len(docs["Hardware"]), len(docs["Workflow"]), len(docs["Template"]))
	}
	type act struct {
		image   string
		command []string
		env     map[string]string
	}
	for _, node := range []string{"e1", "e2"} {
		n := p.Node("edge", node)
		wf := docs["Workflow"][node]
		if got := dig(wf, "spec", "hardwareRef"); got != node {
			t.Errorf("%s: hardwareRef %v", node, got)
		}
		hm := map[string]string{}
		for k, v := range dig(wf, "spec", "hardwareMap").(map[string]any) {
			hm[k] = v.(string)
		}
		if hm["device_1"] != n.Identity.MACs[0] {
			t.Errorf("%s: device_1 %q, want %q", node, hm["device_1"], n.Identity.MACs[0])
		}
		tplName := dig(wf, "spec", "templateRef").(string)
		data := dig(docs["Template"][tplName], "spec", "data").(string)
		r := renderTemplate(t, data, hm)
		if w := dig(r, "tasks", 0, "worker"); w != n.Identity.MACs[0] {
			t.Errorf("%s: worker %v", node, w)
		}
		got := map[string]act{}
		var order []string
		for _, a := range dig(r, "tasks", 0, "actions").([]any) {
			a := a.(map[string]any)
			g := act{image: a["image"].(string), env: map[string]string{}}
			cmd, _ := dig(a, "command").([]any)
			for _, c := range cmd {
				g.command = append(g.command, c.(string))
			}
			env, _ := dig(a, "environment").(map[string]any)
			for k, v := range env {
				g.env[k] = v.(string)
			}
			got[a["name"].(string)] = g
			order = append(order, a["name"].(string))
		}
		wantOrder := []string{"wipe-disk", "image-to-disk", "write-file", "site-file", "enable-ssh", "sync",
			"cloud-init-user-data", "cloud-init-meta-data", "cloud-init-network-config", "kexec", "poweroff", "reboot"}
		if !reflect.DeepEqual(order, wantOrder) {
			t.Errorf("%s: actions %q, want %q", node, order, wantOrder)
		}
		seed := func(file, content string) act {
			return act{image: TinkerbellWriteFile, env: map[string]string{"DEST_DISK": "/dev/nvme0n1p2", "FS_TYPE": "ext4",
				"DEST_PATH": "/var/lib/cloud/seed/nocloud/" + file, "CONTENTS": content, "UID": "0", "GID": "0", "MODE": "0600", "DIRMODE": "0700"}}
		}
		want := map[string]act{
			"image-to-disk": {image: TinkerbellImage2Disk, env: map[string]string{
				"IMG_URL": "https://198.18.0.1/images/full.img.xz", "DEST_DISK": "/dev/nvme0n1", "COMPRESSED": "true"}},
			"write-file": {image: TinkerbellWriteFile, env: map[string]string{"DEST_DISK": "/dev/nvme0n1p1", "FS_TYPE": "ext4",
				"DEST_PATH": "/etc/motd", "CONTENTS": "node " + node + ": {{ not a template }}\n", "UID": "0", "GID": "0", "MODE": "0600", "DIRMODE": "0755"}},
			"site-file": {image: TinkerbellWriteFile, env: map[string]string{"DEST_DISK": "/dev/nvme0n1p2", "FS_TYPE": "vfat",
				"DEST_PATH": "/boot/site.txt", "CONTENTS": "site edge\n", "UID": "0", "GID": "0", "MODE": "0644", "DIRMODE": "0755"}},
			"enable-ssh": {image: TinkerbellCexec, env: map[string]string{"BLOCK_DEVICE": "/dev/nvme0n1p1", "FS_TYPE": "ext4",
				"CHROOT": "y", "DEFAULT_INTERPRETER": "/bin/sh -c", "CMD_LINE": `systemctl enable 'ssh server'\''s unit'`}},
			"sync":                      {image: TinkerbellShell, command: []string{"/bin/sync"}, env: map[string]string{}},
			"cloud-init-user-data":      seed("user-data", n.Artifacts.UserData),
			"cloud-init-meta-data":      seed("meta-data", n.Artifacts.MetaData),
			"cloud-init-network-config": seed("network-config", n.Artifacts.NetworkConfig),
			"kexec": {image: TinkerbellKexec, env: map[string]string{"BLOCK_DEVICE": "/dev/nvme0n1p1", "FS_TYPE": "ext4",
				"KERNEL_PATH": "/boot/vmlinuz", "INITRD_PATH": "/boot/initrd.img", "CMD_LINE": "root=/dev/nvme0n1p1 ro"}},
			"poweroff": {image: TinkerbellWaitDaemon, command: []string{"poweroff"}, env: map[string]string{"IMAGE": TinkerbellShell, "WAIT_SECONDS": "10"}},
			"reboot":   {image: TinkerbellReboot, env: map[string]string{}},
		}
		for name, w := range want {
			if g := got[name]; !reflect.DeepEqual(g, w) {
				t.Errorf("%s: action %s:\n got %#v\nwant %#v", node, name, g, w)
			}
		}
		if w := got["wipe-disk"]; w.image != TinkerbellShell || w.env["DEST_DISK"] != "/dev/nvme0n1" || len(w.command) != 3 {
			t.Errorf("%s: wipe-disk %#v", node, w)
		}
		if !strings.Contains(n.Artifacts.MetaData, "instance-id: "+node) || !strings.Contains(n.Artifacts.UserData, "#cloud-config") {
			t.Errorf("%s: the seed under test is empty", node)
		}
		// Timeouts in seconds: image-to-disk's 1h, the others' default 30m.
		if to := dig(r, "tasks", 0, "actions", 1, "timeout"); to != 3600 {
			t.Errorf("%s: image-to-disk timeout %v, want 3600", node, to)
		}
	}

	hw := docs["Hardware"]["e1"]
	ifaces := dig(hw, "spec", "interfaces").([]any)
	if len(ifaces) != 2 {
		t.Fatalf("e1: %d interfaces, want 2", len(ifaces))
	}
	wantDHCP := map[string]any{
		"mac": "52:54:00:0e:00:01", "hostname": "e1", "arch": "aarch64", "lease_time": 3600,
		"name_servers": []any{"198.18.0.1", "198.18.0.2"},
		"ip":           map[string]any{"address": "198.18.0.11", "netmask": "255.255.255.0", "gateway": "198.18.0.254", "family": 4},
	}
	if got := dig(ifaces[0], "dhcp"); !reflect.DeepEqual(got, wantDHCP) {
		t.Errorf("e1: first interface's dhcp %#v, want %#v", got, wantDHCP)
	}
	if got := dig(ifaces[1], "dhcp"); !reflect.DeepEqual(got, map[string]any{"mac": "52:54:00:0e:01:01", "hostname": "e1", "arch": "aarch64"}) {
		t.Errorf("e1: second interface's dhcp %#v", got)
	}
	if got := dig(ifaces[1], "netboot"); !reflect.DeepEqual(got, map[string]any{"allowPXE": true, "allowWorkflow": true}) {
		t.Errorf("e1: netboot %#v", got)
	}
	if got := dig(hw, "spec", "metadata", "instance", "id"); got != "e1-3" {
		t.Errorf("e1: instance id %v, want e1-3 (the NoCloud instance-id)", got)
	}
	if got := dig(hw, "spec", "disks"); !reflect.DeepEqual(got, []any{map[string]any{"device": "/dev/nvme0n1"}}) {
		t.Errorf("e1: disks %#v", got)
	}
	if got := dig(docs["Hardware"]["e2"], "spec", "interfaces", 0, "dhcp", "hostname"); got != "e2.example" {
		t.Errorf("e2: hostname %v", got)
	}

	var skipped []string
	for _, s := range x.Skipped {
		skipped = append(skipped, s.Node+": "+s.Reason)
	}
	wantSkipped := []string{
		"e3: no MAC address: Tinkerbell finds a machine's Hardware by the MAC it DHCPs with (add identity.mac)",
		`e4: disk "auto": a Tinkerbell action needs a device path (set disk: on the profile or node, or pass --auto-disk /dev/sda)`,
	}
	if !reflect.DeepEqual(skipped, wantSkipped) {
		t.Errorf("skipped:\n%s\nwant:\n%s", strings.Join(skipped, "\n"), strings.Join(wantSkipped, "\n"))
	}
}

// TestTinkerbellSharedValues: what every node of a profile shares is in
// the Template; only what differs is in the hardwareMap.
func TestTinkerbellSharedValues(t *testing.T) {
	x, err := ExportTinkerbell(tinkPlan(t), "edge", TinkerbellOptions{AutoDisk: "/dev/sda", Namespace: "metal"})
	if err != nil {
		t.Fatal(err)
	}
	docs := tinkDocs(t, x)
	if len(docs["Template"]) != 2 || docs["Template"]["base"] == nil || docs["Template"]["full"] == nil {
		t.Fatalf("templates %v, want base and full", keys(docs["Template"]))
	}
	// e4, alone on profile base, has nothing that differs from itself.
	if hm := dig(docs["Workflow"]["e4"], "spec", "hardwareMap").(map[string]any); len(hm) != 1 {
		t.Errorf("e4: hardwareMap %v, want device_1 only", keys(hm))
	}
	if got := dig(docs["Hardware"]["e4"], "spec", "disks", 0, "device"); got != "/dev/sda" {
		t.Errorf("e4: disk %v, want --auto-disk's /dev/sda", got)
	}
	hm := dig(docs["Workflow"]["e1"], "spec", "hardwareMap").(map[string]any)
	want := []string{"cloud_init_meta_data_contents", "cloud_init_network_config_contents", "cloud_init_user_data_contents", "device_1", "write_file_contents"}
	if got := keys(hm); !reflect.DeepEqual(got, want) {
		t.Errorf("e1: hardwareMap keys %q, want %q", got, want)
	}
	for kind, objs := range docs {
		for name, o := range objs {
			if ns := dig(o, "metadata", "namespace"); ns != "metal" {
				t.Errorf("%s %s: namespace %v", kind, name, ns)
			}
		}
	}
	if len(x.Skipped) != 1 {
		t.Errorf("skipped %v, want e3 only", x.Skipped)
	}
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func TestTinkerbellUnknownSite(t *testing.T) {
	_, err := ExportTinkerbell(tinkPlan(t), "edg", TinkerbellOptions{})
	if err == nil || err.Error() != `no site "edg" (sites: edge, s1) (did you mean "edge"?)` {
		t.Errorf("got %v", err)
	}
}

func TestTinkerbellQuoteLiteral(t *testing.T) {
	for _, s := range []string{"", "plain", "a {{ b }} c", "{{{{", "tab\tquote\" back\\slash\nnew", "ünï\u2028", "}}"} {
		data := "v: " + quoteLiteral(s) + "\n"
		r := renderTemplate(t, data, nil)
		if r["v"] != s {
			t.Errorf("%q: rendered %q", s, r["v"])
		}
	}
}

// TestTinkerbellNames: a namespace, name, label or annotation the API
// server would refuse fails the export, before anything is encoded, with
// Kubernetes' words and the node (and its file:line) the object comes
// from. bootops's schema keeps names DNS-1123 labels, so the names here are
// set on the compiled plan, as a plan made some other way could hold them.
func TestTinkerbellNames(t *testing.T) {
	tests := map[string]struct {
		opt    TinkerbellOptions
		change func(p *plan.Plan) (site string)
		want   []string
	}{
		"namespace Tink_System": {opt: TinkerbellOptions{Namespace: "Tink_System"}, want: []string{
			`tinkerbell: namespace "Tink_System": not a Kubernetes namespace: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character`,
		}},
		"namespace of 70 characters": {opt: TinkerbellOptions{Namespace: strings.Repeat("n", 70)}, want: []string{
			`tinkerbell: namespace "` + strings.Repeat("n", 70) + `": not a Kubernetes namespace: must be no more than 63 bytes`,
		}},
		"namespace with a dot": {opt: TinkerbellOptions{Namespace: "tink.system"}, want: []string{
			`tinkerbell: namespace "tink.system": not a Kubernetes namespace: must not contain dots`,
		}},
		"node name": {change: func(p *plan.Plan) string {
			p.Site("edge").Nodes[0].Name = "Rack1_01"
			return "edge"
		}, want: []string{
			`tinkerbell: node Rack1_01 (sites/edge/nodes/nodes.yaml:1): Hardware Rack1_01: metadata.name "Rack1_01": a lowercase RFC 1123 subdomain must consist of`,
			`tinkerbell: node Rack1_01 (sites/edge/nodes/nodes.yaml:1): Workflow Rack1_01: metadata.name "Rack1_01": a lowercase RFC 1123 subdomain must consist of`,
		}},
		"node name over 253 characters": {change: func(p *plan.Plan) string {
			p.Site("edge").Nodes[1].Name = strings.Repeat("e", 254)
			return "edge"
		}, want: []string{
			`tinkerbell: node ` + strings.Repeat("e", 100) + `… (254 bytes) (sites/edge/nodes/nodes.yaml:11): Hardware ` + strings.Repeat("e", 100) + `… (254 bytes): metadata.name "` + strings.Repeat("e", 100) + `… (254 bytes)": must be no more than 253 bytes`,
		}},
		"site name, a label value": {change: func(p *plan.Plan) string {
			s := p.Site("edge")
			s.Name = "Edge_Site."
			for _, n := range s.Nodes {
				n.Site = s.Name
			}
			return s.Name
		}, want: []string{
			`tinkerbell: node e1 (sites/edge/nodes/nodes.yaml:1): Hardware e1: metadata.labels[bootops.dev/site] "Edge_Site.": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
			`tinkerbell: node e1 (sites/edge/nodes/nodes.yaml:1): Template full: metadata.labels[bootops.dev/site] "Edge_Site."`,
			`tinkerbell: node e2 (sites/edge/nodes/nodes.yaml:11): Workflow e2: metadata.labels[bootops.dev/site] "Edge_Site."`,
		}},
		"profile name over 63 characters": {change: func(p *plan.Plan) string {
			long := strings.Repeat("f", 64)
			p.Profile("full").Name = long
			for _, n := range p.Site("edge").Nodes {
				if n.Profile == "full" {
					n.Profile = long
				}
			}
			return "edge"
		}, want: []string{
			`tinkerbell: node e1 (sites/edge/nodes/nodes.yaml:1): Template ` + strings.Repeat("f", 64) + `: metadata.labels[bootops.dev/profile] "` + strings.Repeat("f", 64) + `": must be no more than 63 bytes`,
		}},
		"annotations over 256 KiB": {change: func(p *plan.Plan) string {
			p.Site("edge").Nodes[0].Source = strings.Repeat("x", 256<<10)
			return "edge"
		}, want: []string{
			`tinkerbell: node e1 (` + strings.Repeat("x", 100) + `… (262144 bytes)): Hardware e1: metadata.annotations: 262162 bytes, over Kubernetes' limit of 262144`,
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, site := tinkPlan(t), "edge"
			if tc.change != nil {
				site = tc.change(p)
				// A fresh Plan: its index is built on first use.
				p = &plan.Plan{Sites: p.Sites, Profiles: p.Profiles, MicroOS: p.MicroOS}
			}
			x, err := ExportTinkerbell(p, site, tc.opt)
			if err == nil {
				t.Fatalf("exported %d Hardware, want an error", x.Hardware)
			}
			if x != nil {
				t.Errorf("an export beside the error: %+v", x)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	// The names the schema allows, at their longest, pass: see the longest
	// names case of TestTinkerbellCRDs, which Kubernetes' code validates.
}
