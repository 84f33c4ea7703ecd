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
	run := &csvRun{im: im, sum: CSVSummary{Ignored: map[string]int{}}}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	if !run.header(cr) {
		return run.sum, run.errs
	}
	run.existing = newExistingIndex(im.Existing, im.Site)
	run.seen = map[string]int{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				run.fail(pe.Line, "%v", pe.Err)
			} else {
				run.fail(0, "%v", err)
			}
			break
		}
		line, _ := cr.FieldPos(0)
		n, ok := run.row(line, rec)
		if ok && len(run.errs) == 0 && emit != nil {
			if err := emit(n); err != nil {
				return run.sum, err
			}
		}
	}
	if len(run.errs) > 0 {
		return run.sum, run.errs
	}
	return run.sum, nil
}

// csvRun is one import under way: the header's columns, the identifiers
// the rows before claimed, what was counted and every error so far.
type csvRun struct {
	im         *CSVImport
	col        map[string]int // lower-case column name → index
	extra      []int          // the columns without a bootops equivalent
	extraNames []string
	existing   *existingIndex
	seen       map[string]int // "serial:…", "uuid:…", "mac:…", "name:…" → line
	sum        CSVSummary
	errs       ImportErrors
}

func (run *csvRun) fail(line int, format string, args ...any) {
	run.errs = append(run.errs, &RowError{File: run.im.File, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// header reads the first record: every column found once, the required
// ones present. It reports whether the rows can be read.
func (run *csvRun) header(cr *csv.Reader) bool {
	header, err := cr.Read()
	if err != nil {
		if err == io.EOF {
			err = errors.New("empty file: want a header " + strings.Join(csvRequired, ","))
		}
		run.fail(1, "%v", err)
		return false
	}
	run.col = map[string]int{}
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\uFEFF")
		}
		h = strings.ToLower(strings.TrimSpace(h))
		if _, dup := run.col[h]; dup {
			run.fail(1, "column %q appears twice", header[i])
			continue
		}
		run.col[h] = i
		switch h {
		case "serial", "uuid", "osprofile", "site", "metadata", "mac":
		default:
			run.extra = append(run.extra, i)
		}
	}
	var missing []string
	for _, c := range csvRequired {
		if _, ok := run.col[strings.ToLower(c)]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		run.fail(1, "missing columns: %s (header must name %s, MAC optional)", strings.Join(missing, ", "), strings.Join(csvRequired, ","))
	}
	if len(run.errs) > 0 {
		return false
	}
	run.extraNames = make([]string, len(run.extra))
	for i, x := range run.extra {
		run.extraNames[i] = strings.TrimPrefix(strings.TrimSpace(header[x]), "\uFEFF")
	}
	run.sum.Columns = run.extraNames
	return true
}

// csvRow is what one row says of its node, checked.
type csvRow struct {
	line              int
	serial, uuid, mac string
	name, profile     string
	labels            map[string]string
	keys              []rowKey
}

// rowKey is a name or identifier a row claims: kind, normalised key, and
// as the row wrote it.
type rowKey struct{ kind, key, shown string }

// row checks one record and makes its node, in steps: its own fields, then
// the identifiers earlier rows claimed, then the repository. Each step runs
// only if the ones before found nothing wrong with this row; ok says the
// row is valid.
func (run *csvRun) row(line int, rec []string) (n ImportedNode, ok bool) {
	run.sum.Rows++
	for i, x := range run.extra {
		if x < len(rec) && strings.TrimSpace(rec[x]) != "" {
			run.sum.Ignored[run.extraNames[i]]++
		}
	}
	before := len(run.errs)
	clean := func() bool { return len(run.errs) == before }
	r := run.fields(line, rec)
	if !clean() {
		return n, false
	}
	run.claim(r)
	if !clean() {
		return n, false
	}
	data, err := nodeYAML(r.name, r.serial, r.uuid, r.mac, r.profile, r.labels)
	if err != nil {
		run.fail(line, "%v", err)
		return n, false
	}
	n = ImportedNode{Name: r.name, Line: line, Data: data, Unchanged: run.againstRepository(r, data)}
	if !clean() {
		return n, false
	}
	if n.Unchanged {
		run.sum.Unchanged++
	}
	return n, true
}

// get is the named column's value in rec, trimmed ("" when absent).
func (run *csvRun) get(rec []string, name string) string {
	if i, ok := run.col[name]; ok && i < len(rec) {
		return strings.TrimSpace(rec[i])
	}
	return ""
}

// fields reads and checks a row's values and names its node.
func (run *csvRun) fields(line int, rec []string) *csvRow {
	r := &csvRow{line: line, serial: run.get(rec, "serial"), uuid: run.get(rec, "uuid"), mac: run.get(rec, "mac")}
	if r.serial == "" && r.uuid == "" && r.mac == "" {
		run.fail(line, "no Serial, UUID or MAC: a node needs at least one")
		return r
	}
	if r.serial != "" && !reSerial.MatchString(r.serial) {
		run.fail(line, "Serial %q: want 1 to 64 characters without spaces", r.serial)
	}
	if r.uuid != "" && !reUUID.MatchString(r.uuid) {
		run.fail(line, "UUID %q: want an SMBIOS UUID such as 01020304-0506-0708-090a-0b0c0d0e0f10", r.uuid)
	}
	if r.mac != "" && !reMAC.MatchString(r.mac) {
		run.fail(line, "MAC %q: want a MAC address such as 52:54:00:12:34:56", r.mac)
	}
	if s := run.get(rec, "site"); s != "" && s != run.im.Site {
		run.fail(line, "Site %q differs from --site %s: import each site's rows separately", s, run.im.Site)
	}
	if p := run.get(rec, "osprofile"); p != "" {
		r.profile = ImportName(p)
		switch {
		case !reName.MatchString(r.profile):
			run.fail(line, "OSProfile %q: not usable as a profile name", p)
		case run.im.Existing != nil && run.im.Existing.Profile(r.profile) == nil:
			run.fail(line, "OSProfile %q: no profile %q in the repository (import it with `bootops import eim-profile`)", p, r.profile)
		}
	}
	labels, err := parseMetadata(run.get(rec, "metadata"))
	if err != nil {
		run.fail(line, "Metadata: %v", err)
	}
	r.labels = labels
	r.name = ImportName(cmpOr(r.serial, r.mac, r.uuid))
	if !reName.MatchString(r.name) {
		run.fail(line, "cannot make a node name from %q", cmpOr(r.serial, r.mac, r.uuid))
	}
	r.keys = []rowKey{
		{"name", r.name, r.name},
		{"serial", plan.NormalizeSerial(r.serial), r.serial},
		{"uuid", plan.NormalizeUUID(r.uuid), r.uuid},
		{"mac", plan.NormalizeMAC(r.mac), r.mac},
	}
	return r
}

// claim records the row's name and identifiers; one an earlier row
// claimed is an error.
func (run *csvRun) claim(r *csvRow) {
	for _, k := range r.keys {
		if k.key == "" {
			continue
		}
		if l, ok := run.seen[k.kind+":"+k.key]; ok {
			run.fail(r.line, "%s %s also on line %d", k.kind, k.shown, l)
			continue
		}
		run.seen[k.kind+":"+k.key] = r.line
	}
}

// againstRepository checks the row's node, whose file is data, against the
// repository's: the same node with the same content is a re-import
// (unchanged); any other node claiming its name or an identifier is a
// conflict.
func (run *csvRun) againstRepository(r *csvRow, data []byte) (unchanged bool) {
	if run.existing == nil {
		return false
	}
	same := run.existing.byKey["name:"+r.name]
	unchanged = same != nil && run.im.sameContent(same, data)
	for _, k := range r.keys {
		if k.key == "" {
			continue
		}
		o := run.existing.byKey[k.kind+":"+k.key]
		if o == nil || (unchanged && o == same) {
			continue
		}
		if k.kind == "name" {
			run.fail(r.line, "node %s already exists at %s with other content (edit or remove it there)", r.name, o.Source)
		} else {
			run.fail(r.line, "%s %s also on node %s at %s", k.kind, k.shown, o.Name, o.Source)
		}
	}
	return unchanged
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
