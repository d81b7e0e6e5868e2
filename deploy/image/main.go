// Command image writes the coredns-global image for linux/amd64 and linux/arm64 as an OCI image
// layout tarball, without Docker or a base image: `make image` runs it on the two static builds of
// bin/coredns (`make test` on the linux/amd64 one alone: -arm64 may be left out). The same binaries, flags, SOURCE_DATE_EPOCH and Go and module versions give the same
// bytes, so the same digest.
//
//	go run . -amd64 coredns-linux-amd64 -arm64 coredns-linux-arm64 -tag REF -o image.oci.tar
package main

import (
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options is what the image is made of; nothing else goes in.
type Options struct {
	Binaries map[string]string // architecture (amd64, arm64) -> path of the static coredns build
	Ref      string            // the image reference it is tagged with, e.g. ghcr.io/globaldns/coredns-global:v1
	Epoch    time.Time         // every mtime and the created time
	Labels   map[string]string // config labels, and annotations on the index
}

// platforms are the image's, in index order; variant v8 is what registries and runtimes expect
// for arm64.
var platforms = []struct {
	arch, variant string
	machine       elf.Machine
}{
	{"amd64", "", elf.EM_X86_64},
	{"arm64", "v8", elf.EM_AARCH64},
}

func main() {
	var (
		amd64    = flag.String("amd64", "", "linux/amd64 static coredns binary")
		arm64    = flag.String("arm64", "", "linux/arm64 static coredns binary (none: an image of linux/amd64 alone)")
		out      = flag.String("o", "", "the OCI image layout tarball to write")
		ref      = flag.String("tag", "", "image reference, e.g. ghcr.io/globaldns/coredns-global:v1.0.0")
		source   = flag.String("source", "", "org.opencontainers.image.source label")
		revision = flag.String("revision", "", "org.opencontainers.image.revision label")
		version  = flag.String("version", "", "org.opencontainers.image.version label")
	)
	flag.Parse()
	if *amd64 == "" || *out == "" || *ref == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		fatal(err)
	}
	labels := map[string]string{}
	for k, v := range map[string]string{"source": *source, "revision": *revision, "version": *version} {
		if v != "" {
			labels["org.opencontainers.image."+k] = v
		}
	}
	o := Options{Binaries: map[string]string{"amd64": *amd64}, Ref: *ref, Epoch: epoch, Labels: labels}
	if *arm64 != "" {
		o.Binaries["arm64"] = *arm64
	}
	idx, err := Build(o)
	if err != nil {
		fatal(err)
	}
	if err := writeFile(*out, idx, o); err != nil {
		fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		fatal(err)
	}
	fmt.Printf("%s: %s index %s\n", *out, *ref, d)
	for _, desc := range m.Manifests {
		fmt.Printf("  %s/%s: %s\n", desc.Platform.OS, desc.Platform.Architecture, desc.Digest)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/);
// unset means 0, never the clock.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a non-negative integer", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Build returns the image index: one OCI image per platform of o's binaries, each of a single
// layer. linux/amd64 is required: docker-archive's manifest.json names it.
func Build(o Options) (v1.ImageIndex, error) {
	if _, err := name.NewTag(o.Ref, name.StrictValidation); err != nil {
		return nil, fmt.Errorf("image reference: %w", err)
	}
	if _, ok := o.Binaries["amd64"]; !ok {
		return nil, fmt.Errorf("no binary for linux/amd64")
	}
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		path, ok := o.Binaries[p.arch]
		if !ok {
			continue
		}
		bin, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if err := checkBinary(bin, p.machine); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		plat := v1.Platform{OS: "linux", Architecture: p.arch, Variant: p.variant}
		img, err := image(bin, plat, o)
		if err != nil {
			return nil, fmt.Errorf("linux/%s: %w", p.arch, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: plainImage{img}, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	// Registries (GHCR) show a multi-arch image's source and version from the index's annotations.
	if len(o.Labels) > 0 {
		idx = mutate.Annotations(idx, o.Labels).(v1.ImageIndex)
	}
	return idx, nil
}

// plainImage keeps go-containerregistry from setting artifactType (to the config's media type) on
// the image's entry in the index: that field is for artifacts, and buildkit and podman leave it off
// images.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

func image(bin []byte, plat v1.Platform, o Options) (v1.Image, error) {
	gz, err := layer(bin, o.Epoch)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Epoch}
	cfg := &v1.ConfigFile{
		Architecture: plat.Architecture,
		Variant:      plat.Variant,
		OS:           plat.OS,
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
			Entrypoint: []string{"/coredns"},
			Cmd:        []string{"-conf", "/etc/coredns/Corefile"},
			ExposedPorts: map[string]struct{}{
				"5353/udp": {},
				"5353/tcp": {},
				"9153/tcp": {},
			},
			Labels: o.Labels,
		},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   l,
		History: v1.History{Created: created, CreatedBy: "make image: /coredns, CA certificates, nonroot user"},
	})
}
