package main

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/globaldns/global/deploy"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// valueOptions are Helm's value flags, applied in Helm's order (pkg/cli/values.Options.MergeValues):
// files, then --set-json, --set, --set-string, --set-file. Helm's own type would bring its
// downloaders (OCI registries, plugins) into this binary for -f URLs it does not need.
type valueOptions struct {
	files, jsonValues, values, stringValues, fileValues []string
	ha                                                  bool
}

// merge returns the values the options give, over values-ha.yaml with --ha.
func (o valueOptions) merge(ch fs.FS) (map[string]any, error) {
	base := map[string]any{}
	read := func(name string, data []byte) error {
		cur := map[string]any{}
		if err := yaml.Unmarshal(data, &cur); err != nil {
			return fmt.Errorf("parse %s: %w", name, err)
		}
		base = mergeMaps(base, cur)
		return nil
	}
	if o.ha {
		data, err := fs.ReadFile(ch, "values-ha.yaml")
		if err != nil {
			return nil, err
		}
		if err := read("values-ha.yaml", data); err != nil {
			return nil, err
		}
	}
	for _, f := range o.files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := read(f, data); err != nil {
			return nil, err
		}
	}
	for _, v := range o.jsonValues {
		if err := strvals.ParseJSON(v, base); err != nil {
			return nil, fmt.Errorf("parse --set-json %s: %w", v, err)
		}
	}
	for _, v := range o.values {
		if err := strvals.ParseInto(v, base); err != nil {
			return nil, fmt.Errorf("parse --set %s: %w", v, err)
		}
	}
	for _, v := range o.stringValues {
		if err := strvals.ParseIntoString(v, base); err != nil {
			return nil, fmt.Errorf("parse --set-string %s: %w", v, err)
		}
	}
	for _, v := range o.fileValues {
		readFile := func(rs []rune) (any, error) {
			b, err := os.ReadFile(string(rs))
			return string(b), err
		}
		if err := strvals.ParseIntoFile(v, base, readFile); err != nil {
			return nil, fmt.Errorf("parse --set-file %s: %w", v, err)
		}
	}
	return base, nil
}

// mergeMaps merges b into a, as Helm merges values files: maps key by key, anything else replaced.
func mergeMaps(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	for k, v := range b {
		if vm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// loadChart loads the chart this CLI renders: the build's (deploy.BuildChart) when the Makefile
// named its version and image, so that it renders the image of its own commit, the one `make image`
// built with it; else deploy/chart as it is (a plain `go build`).
func loadChart() (*chart.Chart, fs.FS, error) {
	build := deploy.ChartFiles
	if image != "" {
		build = func() (map[string][]byte, error) { return deploy.BuildChart(version, image) }
	}
	files, err := build()
	if err != nil {
		return nil, nil, err
	}
	c, err := chartOf(files)
	return c, deploy.Chart(), err
}

// chartOf loads a chart from its files, by path.
func chartOf(files map[string][]byte) (*chart.Chart, error) {
	var buffered []*loader.BufferedFile
	for name, data := range files {
		buffered = append(buffered, &loader.BufferedFile{Name: name, Data: data})
	}
	return loader.LoadFiles(buffered)
}

// manifest is one rendered object, its text as the chart wrote it (comments kept).
type manifest struct {
	apiVersion, kind, namespace, name, text string
}

// same says whether o names the same object as m: its API group (any version), kind, namespace
// and name.
func (m manifest) same(o manifest) bool {
	mgv, merr := schema.ParseGroupVersion(m.apiVersion)
	ogv, oerr := schema.ParseGroupVersion(o.apiVersion)
	return m.kind == o.kind && m.namespace == o.namespace && m.name == o.name && merr == nil && oerr == nil && mgv.Group == ogv.Group
}

// render renders the chart as release coredns-global in namespace ns, with opts, in Helm's
// install order, the extension's Namespace first, every namespaced object placed in ns.
func render(opts valueOptions, ns string) ([]manifest, error) {
	c, ch, err := loadChart()
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	overrides, err := opts.merge(ch)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(c, overrides, chartutil.ReleaseOptions{Name: releaseName, Namespace: ns, IsInstall: true, Revision: 1}, nil)
	if err != nil {
		return nil, err
	}
	vals["Release"].(map[string]any)["Service"] = managedBy
	files, err := engine.Render(c, vals)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if base := path.Base(name); strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			delete(files, name)
		}
	}
	_, sorted, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	// The chart gives every namespaced object its namespace, as Linkerd's charts do, so that the
	// output means the same to `kubectl apply` whatever the kubeconfig's current namespace.
	out := []manifest{namespaceManifest(ns)}
	for _, m := range sorted {
		if m.Head == nil || m.Head.Metadata == nil {
			return nil, fmt.Errorf("%s renders an object without a kind or a name", m.Name)
		}
		var placed struct {
			Metadata struct{ Namespace string } `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(m.Content), &placed); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		out = append(out, manifest{apiVersion: m.Head.Version, kind: m.Head.Kind, namespace: placed.Metadata.Namespace,
			name: m.Head.Metadata.Name, text: strings.TrimSpace(m.Content)})
	}
	return out, nil
}

// chartKind matches the apiVersion and kind of an object a template writes.
var chartKind = regexp.MustCompile(`(?m)^apiVersion: (\S+)\n(?:#.*\n)*kind: (\w+)$`)

// chartKinds are the kinds the chart's templates can render, read from the templates themselves:
// uninstall looks for each, and no list of them is kept by hand.
func chartKinds() ([]schema.GroupVersionKind, error) {
	ch := deploy.Chart()
	names, err := fs.Glob(ch, "templates/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []schema.GroupVersionKind
	for _, name := range names {
		data, err := fs.ReadFile(ch, name)
		if err != nil {
			return nil, err
		}
		for _, m := range chartKind.FindAllStringSubmatch(string(data), -1) {
			gv, err := schema.ParseGroupVersion(m[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if gvk := gv.WithKind(m[2]); !slices.Contains(out, gvk) {
				out = append(out, gvk)
			}
		}
	}
	return out, nil
}

// namespaceManifest is the extension's Namespace: labelled so `linkerd check` finds the extension,
// and Pod Security "restricted", which the pods meet (deploy/base/namespace.yaml).
func namespaceManifest(ns string) manifest {
	return manifest{apiVersion: "v1", kind: "Namespace", name: ns, text: fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    %s: %s
    app.kubernetes.io/part-of: %s
    app.kubernetes.io/managed-by: %s
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/audit: restricted`, ns, extensionLabel, extensionName, partOf, managedBy)}
}
