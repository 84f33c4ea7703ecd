package status

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// What a machine sends cannot drive a terminal or a browser, nor forge a
// line: escaped when stored, nothing lost.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"a column\tin sync":               `a column\tin sync`,
		"unicode stays: naïve 日本":         "unicode stays: naïve 日本",
		"\x1b]0;pwned\x07title":           `\x1b]0;pwned\x07title`,
		"\x1b[2J\x1b[Hcleared":            `\x1b[2J\x1b[Hcleared`,
		"line\nfake: 2026 provisioned\r":  `line\nfake: 2026 provisioned\r`,
		"c1 csi \u009b31m and nel \u0085": `c1 csi \u009b31m and nel \u0085`,
		"bidi \u202enoitcurtsni\u202c":    `bidi \u202enoitcurtsni\u202c`,
		"not utf-8 \xff\xfe, del \x7f":    `not utf-8 \xff\xfe, del \x7f`,
		"separators \u2028 \u2029":        `separators \u2028 \u2029`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
	d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{})
	mem := &Memory{}
	evil := Event{Kind: KindScript, Serial: "S\x1b[31m", Message: "x\x1b]52;c;Y2xpcGJvYXJk\x07" + strings.Repeat("é", MaxMessage)}
	mem.Record(evil)
	if err := d.RecordSync(evil); err != nil {
		t.Fatal(err)
	}
	for name, evs := range map[string][]Event{"durable": d.Events(`serial:S\x1b[31m`), "memory": mem.Events(`serial:S\x1b[31m`)} {
		if len(evs) != 1 {
			t.Fatalf("%s: %d events under the escaped key", name, len(evs))
		}
		m := evs[0].Message
		if strings.ContainsRune(m, 0x1b) || !strings.HasPrefix(m, `x\x1b]52;c;Y2xpcGJvYXJk\x07`) {
			t.Errorf("%s: stored %.60q", name, m)
		}
		if !utf8.ValidString(m) || len(m) > MaxMessage+64 || !strings.HasSuffix(m, "more bytes]") {
			t.Errorf("%s: a %d-byte message stored as %d bytes ending %q", name, len(evil.Message), len(m), m[len(m)-30:])
		}
	}
}

// No cell a machine sends is a formula to a spreadsheet, whichever
// separator it splits on.
func TestCSVCell(t *testing.T) {
	for in, want := range map[string]string{
		"SER-1":                "SER-1",
		"=HYPERLINK(\"x\")":    "'=HYPERLINK(\"x\")",
		"@SUM(1)":              "'@SUM(1)",
		"x;=cmd|' /C calc'!A0": "x;'=cmd|' /C calc'!A0",
		"a, +1":                "a, '+1",
		"a\t-2":                "a\t'-2",
		"2026-11-28":           "2026-11-28",
		"":                     "",
	} {
		if got := CSVCell(in); got != want {
			t.Errorf("CSVCell(%q) = %q, want %q", in, got, want)
		}
	}
}

// A Node object written for a machine reads back as what the machine
// reported, whatever it reported: no value adds a key.
func TestNodeYAMLQuoting(t *testing.T) {
	for _, v := range []string{
		"SER-1", "yes", "0x1F", "1e3", "2026-11-25", "- item", "a: b", "x\nkind: Secret", "#comment", "'single'", `"double"`,
		"trailing ", "x\n  injected: true", "{flow: map}", "[a, b]", "&anchor", "*alias", "!tag", "%dir", "@at", "`tick",
		"tab\there", "esc\x1b[0m", "nel\u0085", "null", "~", "<<", "=", "naïve", "back\\slash",
	} {
		m := Machine{Site: "lab", Serial: v, UUID: v, MAC: v}
		out, err := NodeYAML(m, "n1")
		if err != nil {
			t.Errorf("%q: %v", v, err)
			continue
		}
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
			t.Errorf("%q: the Node does not parse: %v\n%s", v, err, out)
			continue
		}
		id, _ := doc["identity"].(map[string]any)
		if len(doc) != 5 || len(id) != 3 || id["serial"] != v || id["uuid"] != v || id["mac"] != v {
			t.Errorf("%q does not round-trip:\n%s\nread back %#v", v, out, doc)
		}
	}
	if _, err := NodeYAML(Machine{Serial: "bad\xff"}, "n1"); err == nil {
		t.Error("a serial that is not UTF-8 was written")
	}
}

// A machine whose check-in carried its TPM's EK hash is registered by it
// too, normalised; a value that is no EK hash is refused, not written.
func TestNodeYAMLTPM(t *testing.T) {
	const ek = "sha256:ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca"
	out, err := NodeYAML(Machine{Site: "lab", MAC: "52:54:00:ab:cd:ef", EK: strings.ToUpper(ek)}, "")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Name     string
		Identity struct {
			MAC string
			TPM map[string]string
		}
	}
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Name != "525400abcdef" || doc.Identity.MAC != "52:54:00:ab:cd:ef" || len(doc.Identity.TPM) != 1 || doc.Identity.TPM["ek"] != ek {
		t.Errorf("read back %+v from:\n%s", doc, out)
	}
	if got := SuggestName(Machine{EK: ek}); got != "tpm-ee08903b8647" {
		t.Errorf("name of a machine known by its TPM alone: %q", got)
	}
	for _, bad := range []string{"sha256:ee08", "ee08903b864743955c122523cfc868b09e2cd9d67e6d629130e8cb55aa11f7ca", ek + "\nkind: Secret"} {
		if out, err := NodeYAML(Machine{Serial: "S1", EK: bad}, "n1"); err == nil {
			t.Errorf("EK %q written:\n%s", bad, out)
		}
	}
}

// Every string of an event is bounded as stored, not the message alone: a
// field padded to 60 KB (what a hostile site sent the hub) costs at most
// MaxField (2 × for the boot chain and cloud-init's result).
func TestEventFieldsBounded(t *testing.T) {
	pad := strings.Repeat("x", 60<<10)
	e := Event{Kind: KindAgent, Node: "n1", Site: "s", Message: "m", Hostname: pad, Kernel: pad, EK: pad, TPM: pad, Boot: pad,
		CloudInit: pad, InstallID: pad, Revision: pad, Held: pad, Sync: pad, Rollout: pad, Action: pad, State: pad}
	d := open(t, filepath.Join(t.TempDir(), "status.db"), Options{})
	mem := &Memory{}
	mem.Record(e)
	if err := d.RecordSync(e); err != nil {
		t.Fatal(err)
	}
	for name, evs := range map[string][]Event{"durable": d.Events("s/n1"), "memory": mem.Events("s/n1")} {
		if len(evs) != 1 {
			t.Fatalf("%s: %d events", name, len(evs))
		}
		b, _ := json.Marshal(evs[0])
		if len(b) > 40<<10 {
			t.Errorf("%s: a %d KB event stored as %d bytes", name, 13*60, len(b))
		}
		if got := evs[0].Hostname; len(got) > MaxField+64 || !strings.HasSuffix(got, "more bytes]") {
			t.Errorf("%s: hostname stored as %d bytes", name, len(got))
		}
	}
}
