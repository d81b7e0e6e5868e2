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
	files := map[string][]byte{}
	blob := func(h v1.Hash, b []byte) string {
		p := "blobs/" + h.Algorithm + "/" + h.Hex
		files[p] = b
		return p
	}

	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	blob(d, raw)
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var docker []dockerManifest
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		raw, err := img.RawManifest()
		if err != nil {
			return err
		}
		blob(desc.Digest, raw)
		cfgName, err := img.ConfigName()
		if err != nil {
			return err
		}
		cfg, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		dm := dockerManifest{Config: blob(cfgName, cfg), RepoTags: []string{o.Ref}}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			h, err := l.Digest()
			if err != nil {
				return err
			}
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return err
			}
			dm.Layers = append(dm.Layers, blob(h, b))
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
	if files["index.json"], err = json.Marshal(top); err != nil {
		return err
	}
	if files["manifest.json"], err = json.Marshal(docker); err != nil {
		return err
	}
	files["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)

	names := []string{"blobs/", "blobs/sha256/"}
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: o.Epoch, Format: tar.FormatUSTAR}
		if b, ok := files[n]; ok {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(b))
		} else {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if _, err := tw.Write(files[n]); err != nil {
			return err
		}
	}
	return tw.Close()
}
