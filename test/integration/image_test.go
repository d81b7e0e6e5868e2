package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"
)

// The OCI image-spec documents TestImage reads, only the fields it checks.
type (
	ociDescriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations"`
		Platform    *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
			Variant      string `json:"variant"`
		} `json:"platform"`
	}
	ociIndex struct {
		SchemaVersion int               `json:"schemaVersion"`
		MediaType     string            `json:"mediaType"`
		Manifests     []ociDescriptor   `json:"manifests"`
		Annotations   map[string]string `json:"annotations"`
	}
	ociManifest struct {
		MediaType string          `json:"mediaType"`
		Config    ociDescriptor   `json:"config"`
		Layers    []ociDescriptor `json:"layers"`
	}
	ociConfig struct {
		OS           string    `json:"os"`
		Architecture string    `json:"architecture"`
		Variant      string    `json:"variant"`
		Created      time.Time `json:"created"`
		RootFS       struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		Config struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			ExposedPorts map[string]struct{}
			Labels       map[string]string
		} `json:"config"`
	}
)

// imageArchive is an OCI image layout tarball, read into memory.
type imageArchive map[string][]byte

func readImageArchive(t *testing.T, path string) imageArchive {
	t.Helper()
	f, err := os.Open(path)
	testkit.Must(t, err)
	defer f.Close()
	a := imageArchive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return a
		}
		testkit.Must(t, err)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b := make([]byte, h.Size)
		_, err = io.ReadFull(tr, b)
		testkit.Must(t, err)
		a[h.Name] = b
	}
}

// copyInPieces copies r to w 64 KiB at a time: a copy or a hash of tens of MB in one call does not
// yield, and the test binary's other goroutines (the query load of the tests beside this one)
// would wait for it.
func copyInPieces(w io.Writer, r io.Reader) error {
	_, err := io.CopyBuffer(w, struct{ io.Reader }{r}, make([]byte, 64<<10)) // no WriterTo: in pieces
	return err
}

// sha256Of is the hex SHA-256 of what r reads, hashed as copyInPieces copies.
func sha256Of(t *testing.T, r io.Reader) string {
	t.Helper()
	h := sha256.New()
	testkit.Must(t, copyInPieces(h, r))
	return hex.EncodeToString(h.Sum(nil))
}

// fileSHA256 is the hex SHA-256 of the file at path, read as sha256Of reads.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	testkit.Must(t, err)
	defer f.Close()
	return sha256Of(t, f)
}

// blob returns the blob d names, checking it is there, of d's size and digest.
func (a imageArchive) blob(t *testing.T, d ociDescriptor) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q: not sha256", d.Digest)
	}
	b, ok := a["blobs/sha256/"+hexDigest]
	if !ok {
		t.Fatalf("blob %s (%s) missing", d.Digest, d.MediaType)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("blob %s: %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
	return b
}

func (a imageArchive) json(t *testing.T, d ociDescriptor, v any) {
	t.Helper()
	testkit.Must(t, json.Unmarshal(a.blob(t, d), v))
}

// topIndex returns index.json's one entry, the image index, and the index it names.
func (a imageArchive) topIndex(t *testing.T) (ociDescriptor, ociIndex) {
	t.Helper()
	var top ociIndex
	testkit.Must(t, json.Unmarshal(a["index.json"], &top))
	if top.SchemaVersion != 2 || len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json: want one image index, got %s", a["index.json"])
	}
	var idx ociIndex
	a.json(t, top.Manifests[0], &idx)
	return top.Manifests[0], idx
}

// layerFile is one file of a layer.
type layerFile struct {
	hdr  *tar.Header
	body []byte
	path string // the binary's: written to a file as it streams
}

// TestImage checks bin/coredns-global.oci.tar, which `make image` writes, with nothing but the
// standard library: the layout, every blob's digest, each platform's config and files (make
// test's linux/amd64, make release's every architecture), that the amd64 binary is ours, and that
// building again from the same inputs gives the same bytes.
func TestImage(t *testing.T) {
	t.Parallel()
	path, err := harness.Built(harness.EnvImageTar, "image")
	testkit.Must(t, err)
	a := readImageArchive(t, path)

	if string(a["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout: %q", a["oci-layout"])
	}
	for name, b := range a {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			if sum := sha256Of(t, bytes.NewReader(b)); sum != hexDigest {
				t.Errorf("%s: content's sha256 is %s", name, sum)
			}
		}
	}

	top, idx := a.topIndex(t)
	ref := top.Annotations["org.opencontainers.image.ref.name"]
	if ref == "" || top.Annotations["io.containerd.image.name"] != ref {
		t.Errorf("index.json annotations %v: want ref.name and io.containerd.image.name, the same", top.Annotations)
	}
	if idx.MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("index media type %q", idx.MediaType)
	}
	var platforms []string
	binaries := map[string]string{} // architecture -> its /coredns, taken out of the image
	tmp := t.TempDir()
	configs := map[string]string{} // architecture -> config blob path
	var epoch time.Time
	for _, d := range idx.Manifests {
		if d.Platform == nil || d.MediaType != "application/vnd.oci.image.manifest.v1+json" {
			t.Fatalf("index entry %+v: want an OCI image manifest with a platform", d)
		}
		p := d.Platform
		platforms = append(platforms, p.OS+"/"+p.Architecture)
		t.Run(p.Architecture, func(t *testing.T) {
			var m ociManifest
			a.json(t, d, &m)
			var c ociConfig
			a.json(t, m.Config, &c)
			configs[p.Architecture] = "blobs/sha256/" + strings.TrimPrefix(m.Config.Digest, "sha256:")
			epoch = c.Created
			if c.OS != p.OS || c.Architecture != p.Architecture || c.Variant != p.Variant {
				t.Errorf("config is for %s/%s/%s, index says %+v", c.OS, c.Architecture, c.Variant, *p)
			}
			if p.Architecture == "arm64" && p.Variant != "v8" {
				t.Errorf("arm64 variant %q, want v8", p.Variant)
			}
			cc := c.Config
			ports := slices.Sorted(maps.Keys(cc.ExposedPorts))
			if cc.User != "65532:65532" || !slices.Equal(cc.Entrypoint, []string{"/coredns"}) ||
				!slices.Equal(cc.Cmd, []string{"-conf", "/etc/coredns/Corefile"}) ||
				!slices.Equal(ports, []string{"5353/tcp", "5353/udp", "9153/tcp"}) {
				t.Errorf("config: %+v", cc)
			}
			for _, l := range []string{"source", "revision", "version"} {
				if cc.Labels["org.opencontainers.image."+l] == "" {
					t.Errorf("no org.opencontainers.image.%s label: %v", l, cc.Labels)
				}
			}

			files := map[string]layerFile{}
			if len(m.Layers) != len(c.RootFS.DiffIDs) {
				t.Fatalf("%d layers, %d diff_ids", len(m.Layers), len(c.RootFS.DiffIDs))
			}
			for i, l := range m.Layers {
				if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
					t.Errorf("layer media type %q", l.MediaType)
				}
				zr, err := gzip.NewReader(bytes.NewReader(a.blob(t, l)))
				testkit.Must(t, err)
				// The layer streams: the binary goes to a file, the rest is small.
				diff := sha256.New()
				tr := tar.NewReader(io.TeeReader(zr, diff))
				for {
					h, err := tr.Next()
					if err == io.EOF {
						break
					}
					testkit.Must(t, err)
					f := layerFile{hdr: h}
					if name := strings.TrimSuffix(h.Name, "/"); name == "coredns" {
						f.path = filepath.Join(tmp, "coredns-"+p.Architecture)
						out, err := os.OpenFile(f.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
						testkit.Must(t, err)
						testkit.Must(t, errors.Join(copyInPieces(out, tr), out.Close()))
					} else {
						f.body = make([]byte, h.Size)
						_, err = io.ReadFull(tr, f.body)
						testkit.Must(t, err)
					}
					files[strings.TrimSuffix(h.Name, "/")] = f
				}
				_, err = io.Copy(io.Discard, tr) // the archive's end, hashed too
				testkit.Must(t, err)
				if sum := "sha256:" + hex.EncodeToString(diff.Sum(nil)); sum != c.RootFS.DiffIDs[i] {
					t.Errorf("layer %d: uncompressed %s, diff_id %s", i, sum, c.RootFS.DiffIDs[i])
				}
			}
			for name, f := range files {
				if !f.hdr.ModTime.Equal(c.Created) {
					t.Errorf("%s: mtime %v, want the image's created time %v", name, f.hdr.ModTime, c.Created)
				}
				if base := filepath.Base(name); base == "sh" || base == "busybox" || base == "bash" {
					t.Errorf("%s: the image should have no shell", name)
				}
			}

			bin, ok := files["coredns"]
			if !ok || bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode&0o111 != 0o111 {
				t.Fatalf("/coredns missing or not executable: %+v", bin.hdr)
			}
			binaries[p.Architecture] = bin.path

			ca := files["etc/ssl/certs/ca-certificates.crt"].body
			n := 0
			for rest := ca; ; n++ {
				var block *pem.Block
				if block, rest = pem.Decode(rest); block == nil {
					break
				}
				if _, err := x509.ParseCertificate(block.Bytes); err != nil {
					t.Errorf("CA bundle, certificate %d: %v", n, err)
				}
			}
			if n <= 100 {
				t.Errorf("CA bundle has %d certificates, want more than 100", n)
			}
			if !strings.Contains(string(files["etc/passwd"].body), "nonroot:x:65532:65532:") ||
				!strings.Contains(string(files["etc/group"].body), "nonroot:x:65532:") {
				t.Errorf("/etc/passwd or /etc/group has no nonroot 65532:\n%s%s", files["etc/passwd"].body, files["etc/group"].body)
			}
			if tmp, ok := files["tmp"]; !ok || tmp.hdr.Typeflag != tar.TypeDir || tmp.hdr.Mode&0o7777 != 0o1777 {
				t.Errorf("/tmp missing or not 1777")
			}
		})
	}
	slices.Sort(platforms)
	if want, _ := releasePlatforms(t); !slices.Equal(platforms, want) {
		t.Fatalf("platforms %v, want %v", platforms, want)
	}
	if t.Failed() {
		return
	}

	// Docker before 25 (and Docker 25+ without the containerd store) loads manifest.json.
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	testkit.Must(t, json.Unmarshal(a["manifest.json"], &docker))
	if len(docker) != 1 || docker[0].Config != configs["amd64"] || !slices.Equal(docker[0].RepoTags, []string{ref}) {
		t.Errorf("manifest.json %s: want the linux/amd64 image (config %s) tagged %s", a["manifest.json"], configs["amd64"], ref)
	}

	if runtime.GOOS == "linux" && binaries[runtime.GOARCH] != "" {
		out, err := exec.Command(binaries[runtime.GOARCH], "-plugins").CombinedOutput()
		testkit.Must(t, err)
		if !slices.Contains(strings.Fields(string(out)), "global") {
			t.Errorf("the image's coredns -plugins does not list global:\n%s", out)
		}
	} else {
		t.Logf("cannot run a linux/amd64 or linux/arm64 binary on %s/%s", runtime.GOOS, runtime.GOARCH)
	}

	// Reproducible: the builder, run again on the binaries taken out of the image and with the
	// same tag, labels and epoch, writes the same bytes.
	again := filepath.Join(tmp, "again.oci.tar")
	labels := idx.Annotations
	builder, err := harness.Built(harness.EnvImageBuilder, "image")
	testkit.Must(t, err)
	args := []string{"-tag", ref, "-o", again,
		"-source", labels["org.opencontainers.image.source"], "-revision", labels["org.opencontainers.image.revision"],
		"-version", labels["org.opencontainers.image.version"]}
	for arch, bin := range binaries {
		args = append(args, "-"+arch, bin)
	}
	cmd := exec.Command(builder, args...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", epoch.Unix()))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	top2, _ := readImageArchive(t, again).topIndex(t)
	if top2.Digest != top.Digest {
		t.Errorf("built again, the index is %s, was %s", top2.Digest, top.Digest)
	}
	if s1, s2 := fileSHA256(t, path), fileSHA256(t, again); s1 != s2 {
		t.Errorf("built again, the tarball's sha256 is %s, was %s", s2, s1)
	}
	t.Logf("%s: index %s", ref, top.Digest)
}
