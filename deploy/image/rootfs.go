package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/pem"
	"fmt"
	"sort"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// nonroot is the user the image runs as: distroless's nonroot, so pod securityContexts written for
// distroless images (runAsUser 65532) keep working.
const nonroot = 65532

// passwd and group are distroless's, shells replaced by /sbin/nologin (there is no shell).
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"tty:x:5:\n" +
		"staff:x:50:\n" +
		"nonroot:x:65532:\n"
)

// caBundlePath is where Go's crypto/x509 (and most other TLS stacks) look first on Linux.
const caBundlePath = "etc/ssl/certs/ca-certificates.crt"

// caBundle returns the trusted roots as PEM. They come from golang.org/x/crypto/x509roots/fallback,
// Mozilla's NSS roots (the set Debian's ca-certificates ships), pinned by go.sum: the bytes
// depend on go.mod, not on the build host's /etc/ssl. A PEM file cannot carry NSS's constraints
// (distrust-after dates), so constrained roots are left out rather than trusted without them.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// checkBinary refuses what cannot run in the image: a binary for another architecture, or one that
// needs a dynamic loader (the image has no libc).
func checkBinary(b []byte, machine elf.Machine) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != machine {
		return fmt.Errorf("built for %s, want %s", f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked; build with CGO_ENABLED=0")
		}
	}
	return nil
}

// layer returns the gzipped tar of the image's whole file system: /coredns, the CA bundle,
// /etc/passwd and /etc/group, /home/nonroot and /tmp. Every header is fixed but for the contents,
// and entries are sorted, so the same binary and epoch give the same bytes.
func layer(binary []byte, epoch time.Time) ([]byte, error) {
	dir := func(name string, mode int64, id int) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: id, Gid: id}
	}
	file := func(name string, mode int64, body []byte) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}
	}
	ca := caBundle()
	bodies := map[string][]byte{
		"coredns":    binary,
		caBundlePath: ca,
		"etc/passwd": []byte(passwd),
		"etc/group":  []byte(group),
	}
	hdrs := []*tar.Header{
		file("coredns", 0o755, binary),
		dir("etc/", 0o755, 0),
		file("etc/group", 0o644, bodies["etc/group"]),
		file("etc/passwd", 0o644, bodies["etc/passwd"]),
		dir("etc/ssl/", 0o755, 0),
		dir("etc/ssl/certs/", 0o755, 0),
		file(caBundlePath, 0o644, ca),
		dir("home/", 0o755, 0),
		dir("home/nonroot/", 0o700, nonroot),
		dir("tmp/", 0o1777, 0),
	}
	sort.Slice(hdrs, func(i, j int) bool { return hdrs[i].Name < hdrs[j].Name })

	var buf bytes.Buffer
	// gzip's header carries no name and a zero mtime, and the level is fixed: the output is too.
	// BestCompression would take twice as long for 1% less.
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		h.ModTime = epoch
		h.Format = tar.FormatUSTAR
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
		if _, err := tw.Write(bodies[h.Name]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
