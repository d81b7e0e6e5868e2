package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeFile writes the tarball to a temporary name first, so an interrupted build never leaves a
// truncated image at path.
func writeFile(path string, idx v1.ImageIndex, o Options) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := Write(f, idx, o); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// dockerManifest is one entry of a docker-archive manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Write writes idx as an OCI image layout tarball, the way `docker save` (Docker 25 and later)
// does: index.json's one entry is the image index, named by o.Ref in both the OCI annotation and
// containerd's (which docker load, ctr import, kind and podman read); manifest.json names the
// linux/amd64 image for loaders that only know docker-archive.
func Write(w io.Writer, idx v1.ImageIndex, o Options) error {
	l := layout{}
	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	l.blob(d, raw)
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var docker []dockerManifest
	for _, desc := range m.Manifests {
		dm, err := l.image(idx, desc, o.Ref)
		if err != nil {
			return err
		}
		if desc.Platform != nil && desc.Platform.Architecture == "amd64" {
			docker = append(docker, dm)
		}
	}
	if len(docker) != 1 {
		return fmt.Errorf("index has %d linux/amd64 images, want 1", len(docker))
	}
	top := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIImageIndex,
			Digest:    d,
			Size:      int64(len(raw)),
			Annotations: map[string]string{
				"io.containerd.image.name":          o.Ref,
				"org.opencontainers.image.ref.name": o.Ref,
			},
		}},
	}
	if l["index.json"], err = json.Marshal(top); err != nil {
		return err
	}
	if l["manifest.json"], err = json.Marshal(docker); err != nil {
		return err
	}
	l["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	return l.write(w, o)
}

// layout is the files of an image layout by path.
type layout map[string][]byte

// blob adds b as the blob of digest h, and returns its path.
func (l layout) blob(h v1.Hash, b []byte) string {
	p := "blobs/" + h.Algorithm + "/" + h.Hex
	l[p] = b
	return p
}

// image adds the blobs of idx's image desc (its manifest, config and layers), and returns its
// docker-archive entry, tagged ref.
func (l layout) image(idx v1.ImageIndex, desc v1.Descriptor, ref string) (dockerManifest, error) {
	img, err := idx.Image(desc.Digest)
	if err != nil {
		return dockerManifest{}, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return dockerManifest{}, err
	}
	l.blob(desc.Digest, raw)
	cfgName, err := img.ConfigName()
	if err != nil {
		return dockerManifest{}, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return dockerManifest{}, err
	}
	dm := dockerManifest{Config: l.blob(cfgName, cfg), RepoTags: []string{ref}}
	layers, err := img.Layers()
	if err != nil {
		return dockerManifest{}, err
	}
	for _, layer := range layers {
		h, err := layer.Digest()
		if err != nil {
			return dockerManifest{}, err
		}
		rc, err := layer.Compressed()
		if err != nil {
			return dockerManifest{}, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return dockerManifest{}, err
		}
		dm.Layers = append(dm.Layers, l.blob(h, b))
	}
	return dm, nil
}

// write writes l as a tarball, its directories and files in name order, each dated o.Epoch.
func (l layout) write(w io.Writer, o Options) error {
	names := []string{"blobs/", "blobs/sha256/"}
	for n := range l {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: o.Epoch, Format: tar.FormatUSTAR}
		if b, ok := l[n]; ok {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(b))
		} else {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if _, err := tw.Write(l[n]); err != nil {
			return err
		}
	}
	return tw.Close()
}
