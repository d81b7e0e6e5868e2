// Package deploy holds what installs the plugin in a cluster. Its Go part is the Helm chart itself,
// embedded, so that tools render the chart in this directory and never a copy of it.
package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
)

//go:embed all:chart
var chart embed.FS

// Chart is deploy/chart: Chart.yaml, values.yaml and the rest at its root.
func Chart() fs.FS {
	sub, err := fs.Sub(chart, "chart")
	if err != nil {
		panic(err) // the directory is embedded above: it is there
	}
	return sub
}

// ChartFiles returns deploy/chart's files by path (relative to the chart), as they are.
func ChartFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(Chart(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[p], err = fs.ReadFile(Chart(), p)
		return err
	})
	return files, err
}

// The lines of Chart.yaml and values.yaml a build sets.
var (
	chartVersion    = regexp.MustCompile(`(?m)^version: .*$`)
	chartAppVersion = regexp.MustCompile(`(?m)^appVersion: .*$`)
	imageDefaults   = regexp.MustCompile(`(?m)^image:\n((?:  #.*\n)*)  repository: ""\n((?:  #.*\n)*)  tag: ""\n`)
)

// BuildChart is the chart of one build, file by file (paths relative to the chart): its version
// and appVersion are version, and its image defaults to image (repository:tag), the image `make
// image` built with it. `make release` packages it, and `linkerd global install` renders it, so
// that both run the image of their own build and an upgrade to another build changes the pods.
func BuildChart(version, image string) (map[string][]byte, error) {
	repository, tag, ok := splitImage(image)
	if !ok || version == "" {
		return nil, fmt.Errorf("a build's chart needs a version (%q) and an image repository:tag (%q)", version, image)
	}
	files, err := ChartFiles()
	if err != nil {
		return nil, err
	}
	meta := chartVersion.ReplaceAllLiteral(files["Chart.yaml"], []byte("version: "+version))
	files["Chart.yaml"] = chartAppVersion.ReplaceAllLiteral(meta, []byte("appVersion: "+strconv.Quote(version)))
	values := string(files["values.yaml"])
	if !imageDefaults.MatchString(values) {
		return nil, fmt.Errorf(`deploy/chart/values.yaml: no image block with repository: "" and tag: ""`)
	}
	files["values.yaml"] = []byte(imageDefaults.ReplaceAllLiteralString(values, "image:\n"+
		"  # This build's image, as `make image` names it.\n"+
		"  repository: "+repository+"\n"+
		"  tag: "+strconv.Quote(tag)+"\n"))
	return files, nil
}

// splitImage splits repository:tag; a port in the registry's host is not a tag.
func splitImage(image string) (repository, tag string, ok bool) {
	i := strings.LastIndexByte(image, ':')
	if i < 0 || strings.Contains(image[i:], "/") {
		return "", "", false
	}
	return image[:i], image[i+1:], image[:i] != "" && image[i+1:] != ""
}
