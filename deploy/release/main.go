// Command release finishes the release directory `make release` fills: it packages the build's
// chart (deploy.BuildChart: this version, this image) with Helm, writes a CycloneDX SBOM of each
// binary with cyclonedx-gomod, CHANGELOG.md's section of the version, and SHA256SUMS of every
// file. The Makefile has put the image archive and the CLI binaries there first.
//
//	go run ./deploy/release -dir bin/release/V -version V -image REPO:V -helm HELM -cyclonedx CYCLONEDX
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/globaldns/global/deploy"
)

// unreleased is the CHANGELOG section of what no release has yet: a build between releases
// carries it.
const unreleased = "Unreleased"

func main() {
	var (
		dir       = flag.String("dir", "", "the release directory")
		version   = flag.String("version", "", "the build's version (make -s version)")
		image     = flag.String("image", "", "the build's image, repository:tag")
		helm      = flag.String("helm", "", "the helm binary that packages the chart")
		cyclonedx = flag.String("cyclonedx", "", "the cyclonedx-gomod binary that writes the SBOMs")
		changelog = flag.String("changelog", "docs/CHANGELOG.md", "the changelog")
	)
	flag.Parse()
	if *dir == "" || *version == "" || *image == "" || *helm == "" || *cyclonedx == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, step := range []func() error{
		func() error { return packageChart(*dir, *version, *image, *helm) },
		func() error { return sboms(*dir, *version, *cyclonedx) },
		func() error { return notes(*dir, *version, *changelog) },
		func() error { return checksums(*dir) },
	} {
		if err := step(); err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			os.Exit(1)
		}
	}
}

// packageChart writes the build's chart into a scratch directory and packages it into dir as
// coredns-global-<version>.tgz, linted first as `make test` lints deploy/chart.
func packageChart(dir, version, image, helm string) error {
	files, err := deploy.BuildChart(version, image)
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "coredns-global-chart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	chart := filepath.Join(scratch, "coredns-global")
	for name, data := range files {
		p := filepath.Join(chart, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	if err := run(helm, "lint", "--strict", chart); err != nil {
		return err
	}
	return run(helm, "package", chart, "--destination", dir)
}

// sboms writes an SBOM (CycloneDX JSON) of each binary in dir from the module information Go
// builds into it: every module linked in, at its version and with its go.sum hash.
func sboms(dir, version, cyclonedx string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !isBinary(filepath.Join(dir, name)) {
			continue
		}
		if err := run(cyclonedx, "bin", "-json", "-version", version, "-output", filepath.Join(dir, name+".cdx.json"), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// isBinary tells an executable (ELF, Mach-O) from the archives and texts beside it.
func isBinary(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return false
	}
	return bytes.Equal(magic, []byte("\x7fELF")) || bytes.Equal(magic, []byte{0xcf, 0xfa, 0xed, 0xfe})
}

// notes writes the changelog's section of version (a release's "## X.Y.Z", heading text first,
// or "## Unreleased" for a build between releases) as dir/CHANGELOG.md.
func notes(dir, version, changelog string) error {
	text, err := os.ReadFile(changelog)
	if err != nil {
		return err
	}
	heading := version
	if strings.Contains(version, "-") {
		heading = unreleased
	}
	body, ok := section(string(text), heading)
	if !ok {
		return fmt.Errorf("%s has no section \"## %s\": write it before tagging v%s", changelog, heading, version)
	}
	return os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte(fmt.Sprintf("# coredns-global %s\n\n%s", version, body)), 0o644)
}

// section is the body of the "## <heading>" section of a Markdown changelog (the heading's first
// word), up to the next "## ".
func section(text, heading string) (string, bool) {
	var body []string
	in, found := false, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "## "); ok {
			f := strings.Fields(rest)
			in = len(f) > 0 && f[0] == heading
			found = found || in
			continue
		}
		if in {
			body = append(body, line)
		}
	}
	return strings.TrimSpace(strings.Join(body, "\n")) + "\n", found
}

// checksums writes SHA256SUMS, as sha256sum writes it (sha256sum -c SHA256SUMS checks it), of
// every other file in dir, by name.
func checksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if e.IsDir() || e.Name() == "SHA256SUMS" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		lines = append(lines, hex.EncodeToString(sum[:])+"  "+e.Name()+"\n")
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "")), 0o644)
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", filepath.Base(name), strings.Join(args, " "), err)
	}
	return nil
}
