package interop

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ImportedProfile is one Profile converted from an EIM OS profile.
type ImportedProfile struct {
	Name string
	Data []byte // the Profile's YAML file
	// Ignored lists the EIM fields without a bootops equivalent, in the
	// file's order.
	Ignored []string
}

var (
	reSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)
	reURL    = regexp.MustCompile(`^(https?|file)://[^\s]+$`)
)

type importedProfile struct {
	APIVersion  string `yaml:"apiVersion"`
	Kind        string `yaml:"kind"`
	Name        string `yaml:"name"`
	Description string `yaml:"description,omitempty"`
	OS          struct {
		Type    string `yaml:"type"`
		Arch    string `yaml:"arch,omitempty"`
		Version string `yaml:"version,omitempty"`
	} `yaml:"os"`
	Image struct {
		URL         string `yaml:"url"`
		SHA256      string `yaml:"sha256"`
		Compression string `yaml:"compression,omitempty"`
	} `yaml:"image"`
}

// ImportEIMProfile converts an EIM OS profile (appVersion apps/v1, spec.*)
// into a bootops Profile. A relative osImageUrl (EIM resolves it against
// its release service) is resolved against baseURL. The errors name file
// and field.
func ImportEIMProfile(data []byte, file, baseURL string) (*ImportedProfile, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &RowError{File: file, Msg: err.Error()}
	}
	spec, ignored, err := eimSpec(&doc, file)
	if err != nil {
		return nil, err
	}
	r := newEIMSpec(file, spec)
	ignored = append(ignored, r.ignored...)
	p := importedProfile{APIVersion: "bootops.dev/v1alpha1", Kind: "Profile"}
	r.name(&p)
	r.description(&p)
	r.osType(&p)
	r.arch(&p)
	p.OS.Version, _ = r.str("osImageVersion")
	r.imageURL(&p, baseURL)
	r.imageSHA256(&p)
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	out, err := marshalYAML(p)
	if err != nil {
		return nil, err
	}
	return &ImportedProfile{Name: p.Name, Data: out, Ignored: ignored}, nil
}

// eimSpec finds the profile's spec in the document, and lists the
// top-level fields (metadata's by name) that have no bootops equivalent.
func eimSpec(doc *yaml.Node, file string) (spec *yaml.Node, ignored []string, err error) {
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, ImportErrors{{File: file, Msg: "not an EIM OS profile: want a mapping with spec"}}
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "appVersion":
		case "spec":
			spec = v
		case "metadata":
			if v.Kind == yaml.MappingNode {
				for j := 0; j+1 < len(v.Content); j += 2 {
					ignored = append(ignored, "metadata."+v.Content[j].Value)
				}
			}
		default:
			ignored = append(ignored, k.Value)
		}
	}
	if spec == nil || spec.Kind != yaml.MappingNode {
		return nil, nil, ImportErrors{{File: file, Msg: "spec: missing (not an EIM OS profile)"}}
	}
	return spec, ignored, nil
}

// eimSpecReader reads an EIM profile's spec field by field, collecting
// every problem.
type eimSpecReader struct {
	file    string
	spec    *yaml.Node
	fields  map[string]*yaml.Node
	ignored []string // the spec's fields without a bootops equivalent
	errs    ImportErrors
}

func newEIMSpec(file string, spec *yaml.Node) *eimSpecReader {
	r := &eimSpecReader{file: file, spec: spec, fields: map[string]*yaml.Node{}}
	for i := 0; i+1 < len(spec.Content); i += 2 {
		k, v := spec.Content[i], spec.Content[i+1]
		r.fields[k.Value] = v
		switch k.Value {
		case "name", "description", "type", "architecture", "profileName", "osImageUrl", "osImageVersion", "osImageSha256":
		default:
			r.ignored = append(r.ignored, k.Value)
		}
	}
	return r
}

func (r *eimSpecReader) fail(line int, format string, args ...any) {
	r.errs = append(r.errs, &RowError{File: r.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// str is the spec's scalar field k, trimmed, and its line ("" and the
// spec's line when it is absent, null or not a scalar).
func (r *eimSpecReader) str(k string) (string, int) {
	v := r.fields[k]
	if v == nil || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return "", r.spec.Line
	}
	return strings.TrimSpace(v.Value), v.Line
}

func (r *eimSpecReader) name(p *importedProfile) {
	pn, line := r.str("profileName")
	p.Name = ImportName(pn)
	switch {
	case pn == "":
		r.fail(line, "spec.profileName: missing")
	case !reName.MatchString(p.Name):
		r.fail(line, "spec.profileName %q: not usable as a profile name", pn)
	}
}

// description is the profile's name, and its description when that says
// more.
func (r *eimSpecReader) description(p *importedProfile) {
	title, _ := r.str("name")
	desc, _ := r.str("description")
	p.Description = title
	if desc != "" && desc != title {
		p.Description = strings.TrimPrefix(title+" — "+desc, " — ")
	}
}

func (r *eimSpecReader) osType(p *importedProfile) {
	switch t, line := r.str("type"); t {
	case "OS_TYPE_IMMUTABLE":
		p.OS.Type = "immutable"
	case "OS_TYPE_MUTABLE":
		p.OS.Type = "mutable"
	case "":
		r.fail(line, "spec.type: missing (want OS_TYPE_IMMUTABLE or OS_TYPE_MUTABLE)")
	default:
		r.fail(line, "spec.type %q: want OS_TYPE_IMMUTABLE or OS_TYPE_MUTABLE", t)
	}
}

// arch is x86_64 when the spec names none.
func (r *eimSpecReader) arch(p *importedProfile) {
	switch a, line := r.str("architecture"); strings.ToLower(a) {
	case "", "x86_64", "amd64":
		p.OS.Arch = "x86_64"
	case "arm64", "aarch64":
		p.OS.Arch = "arm64"
	default:
		r.fail(line, "spec.architecture %q: want x86_64 or arm64", a)
	}
}

// imageURL resolves a relative osImageUrl against baseURL, and takes the
// image's compression from its suffix.
func (r *eimSpecReader) imageURL(p *importedProfile, baseURL string) {
	u, line := r.str("osImageUrl")
	switch {
	case u == "":
		r.fail(line, "spec.osImageUrl: missing")
	case !strings.Contains(u, "://"):
		u = strings.TrimSuffix(baseURL, "/") + "/" + strings.TrimPrefix(u, "/")
	}
	if u != "" && !reURL.MatchString(u) {
		r.fail(line, "spec.osImageUrl %q: want an http, https or file URL", u)
	}
	p.Image.URL = u
	switch lu := strings.ToLower(u); {
	case strings.HasSuffix(lu, ".gz"):
		p.Image.Compression = "gz"
	case strings.HasSuffix(lu, ".zst"):
		p.Image.Compression = "zst"
	case strings.HasSuffix(lu, ".xz"):
		p.Image.Compression = "xz"
	}
}

func (r *eimSpecReader) imageSHA256(p *importedProfile) {
	sum, line := r.str("osImageSha256")
	p.Image.SHA256 = strings.ToLower(sum)
	switch {
	case sum == "":
		r.fail(line, "spec.osImageSha256: missing")
	case !reSHA256.MatchString(p.Image.SHA256):
		r.fail(line, "spec.osImageSha256 %q: want 64 hex digits", sum)
	}
}
