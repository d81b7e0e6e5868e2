package main

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"regexp"
	"strings"

	"github.com/globaldns/global/deploy"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
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

// loadChart loads the embedded deploy/chart.
func loadChart() (*chart.Chart, fs.FS, error) {
	ch := deploy.Chart()
	var files []*loader.BufferedFile
	err := fs.WalkDir(ch, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(ch, p)
		files = append(files, &loader.BufferedFile{Name: p, Data: data})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	c, err := loader.LoadFiles(files)
	return c, ch, err
}

// manifest is one rendered object, its text as the chart wrote it (comments kept).
type manifest struct {
	kind, name, text string
}

// clusterScoped are the cluster-scoped kinds the chart may render; namespaced the rest it may.
// A kind in neither stops the render: its scope decides where it goes and whether uninstall lists it.
var (
	clusterScoped = map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "PriorityClass": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	namespaced = map[string]bool{"ServiceAccount": true, "ConfigMap": true, "Service": true, "Deployment": true, "Role": true,
		"RoleBinding": true, "PodDisruptionBudget": true, "ServiceMonitor": true, "PrometheusRule": true}
)

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
	out := []manifest{namespaceManifest(ns)}
	for _, m := range sorted {
		if m.Head == nil || m.Head.Metadata == nil {
			return nil, fmt.Errorf("%s renders an object without a kind or a name", m.Name)
		}
		kind, name := m.Head.Kind, m.Head.Metadata.Name
		text := strings.TrimSpace(m.Content)
		switch {
		case namespaced[kind]:
			if text, err = placeIn(text, ns); err != nil {
				return nil, fmt.Errorf("%s %s: %w", kind, name, err)
			}
		case !clusterScoped[kind]:
			return nil, fmt.Errorf("%s renders a %s, of a scope this CLI does not know", m.Name, kind)
		}
		out = append(out, manifest{kind: kind, name: name, text: text})
	}
	return out, nil
}

// topMetadata is the metadata: line of an object, at the top level; ownNamespace, a namespace the
// chart gave it (the Roles in the watched namespaces).
var (
	topMetadata  = regexp.MustCompile(`(?m)^metadata:[ \t]*$`)
	ownNamespace = regexp.MustCompile(`(?m)^  namespace: `)
)

// placeIn puts the object of text in namespace ns, unless the chart placed it, as `helm install
// --namespace` does through its client: a manifest for kubectl must say it. Text, not a
// re-encoding, so the chart's comments stay.
func placeIn(text, ns string) (string, error) {
	loc := topMetadata.FindStringIndex(text)
	if loc == nil {
		return "", fmt.Errorf("no metadata")
	}
	if ownNamespace.MatchString(text) {
		return text, nil
	}
	return text[:loc[1]] + "\n  namespace: " + ns + text[loc[1]:], nil
}

// namespaceManifest is the extension's Namespace: labelled so `linkerd check` finds the extension,
// and Pod Security "restricted", which the pods meet (deploy/base/namespace.yaml).
func namespaceManifest(ns string) manifest {
	return manifest{kind: "Namespace", name: ns, text: fmt.Sprintf(`apiVersion: v1
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
