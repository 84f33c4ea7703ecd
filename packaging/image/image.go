package image

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Layer is one layer of the image and the history line that says what it
// holds.
type Layer struct {
	Comment string
	Files   []File
}

// Config is what the image holds and how it runs.
type Config struct {
	Layers  []Layer
	Created time.Time // every timestamp in the image: config, history, tar entries

	User       string
	WorkingDir string
	Entrypoint []string
	Cmd        []string
	Env        []string
	Ports      []string // "8080/tcp", "67/udp"
	Volumes    []string
	Labels     map[string]string
}

// Build makes the image: an OCI manifest for linux/amd64 whose layers
// are Config's, gzip-compressed.
func Build(c Config) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: c.Created.UTC().Truncate(time.Second)}
	for _, l := range c.Layers {
		b, err := Tar(l.Files, created.Time)
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", l.Comment, err)
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(b)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("image: layer %q: %w", l.Comment, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: created, CreatedBy: "bootops mkimage", Comment: l.Comment},
		})
		if err != nil {
			return nil, fmt.Errorf("image: layer %q: %w", l.Comment, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = "amd64", "linux", created
	cf.Config = v1.Config{
		User: c.User, WorkingDir: c.WorkingDir, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env,
		Labels: c.Labels, ExposedPorts: set(c.Ports), Volumes: set(c.Volumes),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

func set(keys []string) map[string]struct{} {
	if len(keys) == 0 {
		return nil
	}
	m := map[string]struct{}{}
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// Write puts img in dir as an OCI image layout (dir/oci, the image named
// ref in its index) and a docker-archive tarball (dir/bootops.tar, tagged
// ref) that podman load and docker load read. What was in dir/oci goes.
func Write(img v1.Image, dir, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	oci := filepath.Join(dir, "oci")
	if err := os.RemoveAll(oci); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	p, err := layout.Write(oci, empty.Index)
	if err != nil {
		return fmt.Errorf("image: %s: %w", oci, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return fmt.Errorf("image: %s: %w", oci, err)
	}
	if err := tarball.WriteToFile(filepath.Join(dir, "bootops.tar"), tag, img); err != nil {
		return fmt.Errorf("image: %s: %w", filepath.Join(dir, "bootops.tar"), err)
	}
	return nil
}

// Files lists an image's regular files and folders with their modes,
// owners and sizes, flattened over its layers, sorted by path: what a
// test looks at instead of unpacking.
func Files(img v1.Image) ([]Entry, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	seen := map[string]Entry{}
	for _, l := range layers {
		if err := walk(l, func(e Entry) { seen[e.Path] = e }); err != nil {
			return nil, err
		}
	}
	out := make([]Entry, 0, len(seen))
	for _, e := range seen {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}
