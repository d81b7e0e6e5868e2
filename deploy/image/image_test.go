package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/cmd/crane/cmd"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// fakeBinary writes an ELF header for machine, all checkBinary looks at, so the tests need no
// cross-compiled coredns.
func fakeBinary(t *testing.T, dir string, machine elf.Machine) string {
	t.Helper()
	h := elf.Header64{
		Ident:   [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:    uint16(elf.ET_EXEC),
		Machine: uint16(machine),
		Version: uint32(elf.EV_CURRENT),
		Ehsize:  64,
	}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, machine.String())
	if err := os.WriteFile(p, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func testOptions(t *testing.T) Options {
	dir := t.TempDir()
	return Options{
		Binaries: map[string]string{"amd64": fakeBinary(t, dir, elf.EM_X86_64), "arm64": fakeBinary(t, dir, elf.EM_AARCH64)},
		Ref:      "ghcr.io/globaldns/coredns-global:test",
		Epoch:    time.Unix(1700000000, 0).UTC(),
		Labels:   map[string]string{"org.opencontainers.image.version": "test"},
	}
}

func build(t *testing.T, o Options, path string) v1.Hash {
	t.Helper()
	idx, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(path, idx, o); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReproducible(t *testing.T) {
	o := testOptions(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	if da, db := build(t, o, a), build(t, o, b); da != db {
		t.Fatalf("index digests differ: %s, %s", da, db)
	}
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ba, bb) {
		t.Fatal("same inputs, different tarballs")
	}
	o.Epoch = o.Epoch.Add(time.Second)
	if build(t, o, b) == build(t, testOptions(t), a) {
		t.Fatal("the epoch does not reach the image")
	}
}

// TestPlatforms: an image of the platforms given, linux/amd64 required.
func TestPlatforms(t *testing.T) {
	o := testOptions(t)
	delete(o.Binaries, "arm64")
	idx, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Platform.Architecture != "amd64" {
		t.Errorf("an image of linux/amd64 alone: %+v", m.Manifests)
	}
	o = testOptions(t)
	delete(o.Binaries, "amd64")
	if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "linux/amd64") {
		t.Errorf("an image without linux/amd64: %v", err)
	}
}

func TestWrongBinary(t *testing.T) {
	o := testOptions(t)
	o.Binaries["arm64"] = o.Binaries["amd64"]
	if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "EM_X86_64") {
		t.Fatalf("an amd64 binary as arm64's: %v", err)
	}
}

// crane runs crane's own command line in process and returns what it prints.
func crane(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	c := cmd.New("crane", "", nil)
	c.SetArgs(args)
	c.SetOut(&out)
	if err := c.Execute(); err != nil {
		t.Fatalf("crane %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(out.String())
}

// untar extracts the layout tarball into a directory, as `mkdir DIR && tar -xf TAR -C DIR` does.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			err = os.MkdirAll(p, 0o755)
		} else {
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestPush pushes the tarball to a registry on loopback with crane, the two ways it can, and pulls
// back what each pushed.
func TestPush(t *testing.T) {
	o := testOptions(t)
	dir := t.TempDir()
	tarball := filepath.Join(dir, "coredns-global.oci.tar")
	want := build(t, o, tarball)

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	// The whole index: crane push on the extracted layout, whose index.json has one entry, the
	// image index (with --index, crane would wrap index.json itself in a new index).
	layout := filepath.Join(dir, "layout")
	untar(t, tarball, layout)
	ref := host + "/coredns-global:test"
	if got := crane(t, "push", layout, ref); got != host+"/coredns-global@"+want.String() {
		t.Errorf("crane push %s printed %q, want the index digest %s", layout, got, want)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d != want {
		t.Errorf("pulled index %s, pushed %s", d, want)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatalf("%s: %v", desc.Platform, err)
		}
		if cf.Architecture != desc.Platform.Architecture || cf.Config.User != "65532:65532" {
			t.Errorf("%s: config %+v", desc.Platform, cf)
		}
	}
	if len(m.Manifests) != 2 {
		t.Errorf("pulled %d manifests, want 2", len(m.Manifests))
	}

	// crane push on the tarball itself reads manifest.json, the docker-archive entry: linux/amd64
	// only. That is what it does, not what a release wants.
	single := host + "/coredns-global:amd64"
	crane(t, "push", tarball, single)
	got, err := name.ParseReference(single)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(got)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("crane push %s: %s %s", tarball, desc.MediaType, desc.Digest)
	if desc.MediaType.IsIndex() {
		t.Errorf("crane push of the tarball pushed an index: update docs/install.md, it can push the tarball")
	}
}
