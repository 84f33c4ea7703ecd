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
	var errs ImportErrors
	fail := func(line int, format string, args ...any) {
		errs = append(errs, &RowError{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		fail(0, "not an EIM OS profile: want a mapping with spec")
		return nil, errs
	}
	top := doc.Content[0]
	var ignored []string
	var spec *yaml.Node
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
		fail(0, "spec: missing (not an EIM OS profile)")
		return nil, errs
	}
	f := map[string]*yaml.Node{}
	for i := 0; i+1 < len(spec.Content); i += 2 {
		k, v := spec.Content[i], spec.Content[i+1]
		f[k.Value] = v
		switch k.Value {
		case "name", "description", "type", "architecture", "profileName", "osImageUrl", "osImageVersion", "osImageSha256":
		default:
			ignored = append(ignored, k.Value)
		}
	}
	str := func(k string) (string, int) {
		v := f[k]
		if v == nil || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return "", spec.Line
		}
		return strings.TrimSpace(v.Value), v.Line
	}
	p := importedProfile{APIVersion: "bootops.dev/v1alpha1", Kind: "Profile"}
	pn, line := str("profileName")
	p.Name = ImportName(pn)
	switch {
	case pn == "":
		fail(line, "spec.profileName: missing")
	case !reName.MatchString(p.Name):
		fail(line, "spec.profileName %q: not usable as a profile name", pn)
	}
	title, _ := str("name")
	desc, _ := str("description")
	p.Description = title
	if desc != "" && desc != title {
		p.Description = strings.TrimPrefix(title+" — "+desc, " — ")
	}
	switch t, line := str("type"); t {
	case "OS_TYPE_IMMUTABLE":
		p.OS.Type = "immutable"
	case "OS_TYPE_MUTABLE":
		p.OS.Type = "mutable"
	case "":
		fail(line, "spec.type: missing (want OS_TYPE_IMMUTABLE or OS_TYPE_MUTABLE)")
	default:
		fail(line, "spec.type %q: want OS_TYPE_IMMUTABLE or OS_TYPE_MUTABLE", t)
	}
	switch a, line := str("architecture"); strings.ToLower(a) {
	case "", "x86_64", "amd64":
		p.OS.Arch = "x86_64"
	case "arm64", "aarch64":
		p.OS.Arch = "arm64"
	default:
		fail(line, "spec.architecture %q: want x86_64 or arm64", a)
	}
	p.OS.Version, _ = str("osImageVersion")
	u, line := str("osImageUrl")
	switch {
	case u == "":
		fail(line, "spec.osImageUrl: missing")
	case !strings.Contains(u, "://"):
		u = strings.TrimSuffix(baseURL, "/") + "/" + strings.TrimPrefix(u, "/")
	}
	if u != "" && !reURL.MatchString(u) {
		fail(line, "spec.osImageUrl %q: want an http, https or file URL", u)
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
	sum, line := str("osImageSha256")
	p.Image.SHA256 = strings.ToLower(sum)
	switch {
	case sum == "":
		fail(line, "spec.osImageSha256: missing")
	case !reSHA256.MatchString(p.Image.SHA256):
		fail(line, "spec.osImageSha256 %q: want 64 hex digits", sum)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	out, err := marshalYAML(p)
	if err != nil {
		return nil, err
	}
	return &ImportedProfile{Name: p.Name, Data: out, Ignored: ignored}, nil
}
