package interop

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bootops/bootops/plan"
)

// The schema's patterns (schema/bootops.cue), checked row by row so an
// import reports CSV line numbers rather than positions in files it has not
// written yet.
var (
	reSerial = regexp.MustCompile(`^[^\s]{1,64}$`)
	reUUID   = regexp.MustCompile(`^[0-9A-Fa-f]{8}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{12}$`)
	reMAC    = regexp.MustCompile(`^[0-9A-Fa-f]{2}([:-][0-9A-Fa-f]{2}){5}$`)
	reName   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// RowError is one problem of an imported file: "file:line: message".
type RowError struct {
	File string
	Line int
	Msg  string
}

func (e *RowError) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// ImportErrors is every problem of an import, in file order.
type ImportErrors []*RowError

func (l ImportErrors) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// ImportedNode is one Node file an import produces.
type ImportedNode struct {
	Name string
	Line int
	// Data is the Node's YAML file.
	Data []byte
	// Unchanged: the repository already holds this node with exactly
	// this content (a re-import).
	Unchanged bool
}

// CSVImport converts EIM's bulk-import CSV (Serial, UUID, OSProfile, Site,
// Secure, RemoteUser, Metadata and an optional MAC column) into Nodes.
type CSVImport struct {
	File string // the CSV's name, for messages
	Site string // the site every row is imported into
	// Existing is the repository's Plan: rows are checked against its
	// nodes and profiles. nil skips those checks.
	Existing *plan.Plan
	// Repo holds Existing's sources, to tell a re-imported node (same
	// file content) from a conflicting one.
	Repo fs.FS
}

// CSVSummary is what an import did besides its nodes.
type CSVSummary struct {
	Rows, Unchanged int
	// Ignored counts, per column without a bootops equivalent, the rows
	// that had a value in it.
	Ignored map[string]int
	// Columns is Ignored's keys in the file's order.
	Columns []string
}

var csvRequired = []string{"Serial", "UUID", "OSProfile", "Site", "Secure", "RemoteUser", "Metadata"}

// Import reads the CSV row by row and calls emit for every valid row while
// no row has failed; it returns ImportErrors listing every bad row. Memory
// grows only with the identifiers kept to find duplicates.
func (im *CSVImport) Import(r io.Reader, emit func(ImportedNode) error) (CSVSummary, error) {
	sum := CSVSummary{Ignored: map[string]int{}}
	var errs ImportErrors
	fail := func(line int, format string, args ...any) {
		errs = append(errs, &RowError{File: im.File, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if err == io.EOF {
			err = errors.New("empty file: want a header " + strings.Join(csvRequired, ","))
		}
		fail(1, "%v", err)
		return sum, errs
	}
	col := map[string]int{}
	var extra []int
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\uFEFF")
		}
		h = strings.ToLower(strings.TrimSpace(h))
		if _, dup := col[h]; dup {
			fail(1, "column %q appears twice", header[i])
			continue
		}
		col[h] = i
		switch h {
		case "serial", "uuid", "osprofile", "site", "metadata", "mac":
		default:
			extra = append(extra, i)
		}
	}
	var missing []string
	for _, c := range csvRequired {
		if _, ok := col[strings.ToLower(c)]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		fail(1, "missing columns: %s (header must name %s, MAC optional)", strings.Join(missing, ", "), strings.Join(csvRequired, ","))
	}
	if len(errs) > 0 {
		return sum, errs
	}
	extraNames := make([]string, len(extra))
	for i, x := range extra {
		extraNames[i] = strings.TrimPrefix(strings.TrimSpace(header[x]), "\uFEFF")
	}
	sum.Columns = extraNames

	ex := newExistingIndex(im.Existing, im.Site)
	seen := map[string]int{} // "serial:…", "uuid:…", "mac:…", "name:…" → line
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				fail(pe.Line, "%v", pe.Err)
			} else {
				fail(0, "%v", err)
			}
			break
		}
		line, _ := cr.FieldPos(0)
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		sum.Rows++
		for i, x := range extra {
			if x < len(rec) && strings.TrimSpace(rec[x]) != "" {
				sum.Ignored[extraNames[i]]++
			}
		}
		before := len(errs)
		serial, uuid, mac := get("serial"), get("uuid"), get("mac")
		if serial == "" && uuid == "" && mac == "" {
			fail(line, "no Serial, UUID or MAC: a node needs at least one")
			continue
		}
		if serial != "" && !reSerial.MatchString(serial) {
			fail(line, "Serial %q: want 1 to 64 characters without spaces", serial)
		}
		if uuid != "" && !reUUID.MatchString(uuid) {
			fail(line, "UUID %q: want an SMBIOS UUID such as 01020304-0506-0708-090a-0b0c0d0e0f10", uuid)
		}
		if mac != "" && !reMAC.MatchString(mac) {
			fail(line, "MAC %q: want a MAC address such as 52:54:00:12:34:56", mac)
		}
		if s := get("site"); s != "" && s != im.Site {
			fail(line, "Site %q differs from --site %s: import each site's rows separately", s, im.Site)
		}
		profile := ""
		if p := get("osprofile"); p != "" {
			profile = ImportName(p)
			switch {
			case !reName.MatchString(profile):
				fail(line, "OSProfile %q: not usable as a profile name", p)
			case im.Existing != nil && im.Existing.Profile(profile) == nil:
				fail(line, "OSProfile %q: no profile %q in the repository (import it with `bootops import eim-profile`)", p, profile)
			}
		}
		labels, lerr := parseMetadata(get("metadata"))
		if lerr != nil {
			fail(line, "Metadata: %v", lerr)
		}
		var name string
		switch {
		case serial != "":
			name = ImportName(serial)
		case mac != "":
			name = ImportName(mac)
		default:
			name = ImportName(uuid)
		}
		if !reName.MatchString(name) {
			fail(line, "cannot make a node name from %q", cmpOr(serial, mac, uuid))
		}
		if len(errs) > before {
			continue
		}
		keys := []struct{ kind, key, shown string }{
			{"name", name, name},
			{"serial", plan.NormalizeSerial(serial), serial},
			{"uuid", plan.NormalizeUUID(uuid), uuid},
			{"mac", plan.NormalizeMAC(mac), mac},
		}
		for _, k := range keys {
			if k.key == "" {
				continue
			}
			if l, ok := seen[k.kind+":"+k.key]; ok {
				fail(line, "%s %s also on line %d", k.kind, k.shown, l)
				continue
			}
			seen[k.kind+":"+k.key] = line
		}
		if len(errs) > before {
			continue
		}
		data, err := nodeYAML(name, serial, uuid, mac, profile, labels)
		if err != nil {
			fail(line, "%v", err)
			continue
		}
		n := ImportedNode{Name: name, Line: line, Data: data}
		// Against the repository: the same node with the same content is
		// a re-import; any other node claiming a name or identifier is a
		// conflict.
		if ex != nil {
			same := ex.byKey["name:"+name]
			if same != nil && im.sameContent(same, data) {
				n.Unchanged = true
			}
			for _, k := range keys {
				if k.key == "" {
					continue
				}
				o := ex.byKey[k.kind+":"+k.key]
				if o == nil || (n.Unchanged && o == same) {
					continue
				}
				if k.kind == "name" {
					fail(line, "node %s already exists at %s with other content (edit or remove it there)", name, o.Source)
				} else {
					fail(line, "%s %s also on node %s at %s", k.kind, k.shown, o.Name, o.Source)
				}
			}
		}
		if len(errs) > before {
			continue
		}
		if n.Unchanged {
			sum.Unchanged++
		}
		if len(errs) == 0 && emit != nil {
			if err := emit(n); err != nil {
				return sum, err
			}
		}
	}
	if len(errs) > 0 {
		return sum, errs
	}
	return sum, nil
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

type existingIndex struct {
	byKey map[string]*plan.Node
}

// newExistingIndex indexes the repository's nodes: names within site,
// identifiers across all sites (a machine is registered once).
func newExistingIndex(p *plan.Plan, site string) *existingIndex {
	if p == nil {
		return nil
	}
	ix := &existingIndex{byKey: map[string]*plan.Node{}}
	for _, s := range p.Sites {
		for _, n := range s.Nodes {
			if s.Name == site {
				ix.byKey["name:"+n.Name] = n
			}
			if n.Identity.Serial != "" {
				ix.byKey["serial:"+plan.NormalizeSerial(n.Identity.Serial)] = n
			}
			if n.Identity.UUID != "" {
				ix.byKey["uuid:"+plan.NormalizeUUID(n.Identity.UUID)] = n
			}
			for _, m := range n.Identity.MACs {
				ix.byKey["mac:"+plan.NormalizeMAC(m)] = n
			}
		}
	}
	return ix
}

var reLineSuffix = regexp.MustCompile(`(:\d+)+$`)

func (im *CSVImport) sameContent(n *plan.Node, data []byte) bool {
	if im.Repo == nil {
		return false
	}
	old, err := fs.ReadFile(im.Repo, reLineSuffix.ReplaceAllString(n.Source, ""))
	return err == nil && bytes.Equal(old, data)
}

// ImportName makes a bootops name from an EIM identifier: lower case,
// every run of other characters than [a-z0-9] one '-', at most 63
// characters.
func ImportName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	out := b.String()
	if len(out) > 63 {
		out = strings.TrimRight(out[:63], "-")
	}
	return out
}

// parseMetadata reads EIM's Metadata: key=value pairs separated by '&' or
// ';', or a JSON object of strings.
func parseMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	if strings.HasPrefix(s, "{") {
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("%q: want key=value&key=value or a JSON object of strings: %v", s, err)
		}
		return out, nil
	}
	for _, kv := range strings.FieldsFunc(s, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value pairs separated by '&' or ';'", kv)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

type importedIdentity struct {
	Serial string `yaml:"serial,omitempty"`
	UUID   string `yaml:"uuid,omitempty"`
	MAC    string `yaml:"mac,omitempty"`
}

type importedNode struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Name       string            `yaml:"name"`
	Identity   importedIdentity  `yaml:"identity"`
	Profile    string            `yaml:"profile,omitempty"`
	Labels     map[string]string `yaml:"labels,omitempty"`
}

func nodeYAML(name, serial, uuid, mac, profile string, labels map[string]string) ([]byte, error) {
	return marshalYAML(importedNode{
		APIVersion: "bootops.dev/v1alpha1", Kind: "Node", Name: name,
		Identity: importedIdentity{Serial: serial, UUID: uuid, MAC: mac},
		Profile:  profile, Labels: labels,
	})
}

func marshalYAML(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
