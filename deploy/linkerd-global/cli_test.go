package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/deploy"
	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/test/testkit"

	k8sversion "k8s.io/apimachinery/pkg/version"
	"sigs.k8s.io/yaml"
)

// objects parses rendered manifests.
func objects(t *testing.T, ms []manifest) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range ms {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(m.text), &o); err != nil {
			t.Fatalf("%s %s: %v\n%s", m.kind, m.name, err, m.text)
		}
		out = append(out, o)
	}
	return out
}

// The scopes of the kinds the chart renders, as the API serves them (the CLI itself asks no list:
// the chart places each object; test/integration's TestCLIRendersTheChart asks the API server).
var (
	clusterScoped = map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "PriorityClass": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	namespaced = map[string]bool{"ServiceAccount": true, "ConfigMap": true, "Service": true, "Deployment": true, "Role": true,
		"RoleBinding": true, "PodDisruptionBudget": true, "ServiceMonitor": true, "PrometheusRule": true, "NetworkPolicy": true}
)

// TestRenderPlacesEveryObject: with every optional object on, the chart places each namespaced
// object in the namespace, the labelled Namespace comes first, and the values reach the Corefile.
func TestRenderPlacesEveryObject(t *testing.T) {
	ms, err := render(valueOptions{ha: true, values: []string{"image.repository=ghcr.io/globaldns/coredns-global,clusterName=east,monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true,networkPolicy.enabled=true"},
		jsonValues: []string{`localities={"west":{"zone":"us-east-1b"}}`}}, "dns")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for i, o := range objects(t, ms) {
		meta := o["metadata"].(map[string]any)
		kind := o["kind"].(string)
		kinds[kind] = true
		switch {
		case i == 0:
			if labels := meta["labels"].(map[string]any); kind != "Namespace" || meta["name"] != "dns" || labels[extensionLabel] != extensionName ||
				labels["pod-security.kubernetes.io/enforce"] != "restricted" {
				t.Errorf("first object: %v", o)
			}
		case clusterScoped[kind]:
			if meta["namespace"] != nil {
				t.Errorf("%s %s has a namespace", kind, meta["name"])
			}
		case !namespaced[kind]:
			t.Errorf("%s %s: a kind this test does not know the scope of", kind, meta["name"])
		case meta["namespace"] != "dns":
			t.Errorf("%s %s: namespace %v", kind, meta["name"], meta["namespace"])
		}
		if labels, _ := meta["labels"].(map[string]any); labels["app.kubernetes.io/managed-by"] != managedBy || labels["app.kubernetes.io/part-of"] != partOf {
			t.Errorf("%s %s: labels %v", kind, meta["name"], labels)
		}
	}
	for _, k := range []string{"PriorityClass", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule", "ClusterRole", "Deployment", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "NetworkPolicy"} {
		if !kinds[k] {
			t.Errorf("no %s rendered: %v", k, kinds)
		}
	}
	cm := ms[slices.IndexFunc(ms, func(m manifest) bool { return m.kind == "ConfigMap" && m.name == "coredns-global" })]
	if !strings.Contains(cm.text, "locality west zone=us-east-1b") || !strings.Contains(cm.text, "# No `cache`") {
		t.Errorf("the Corefile lacks the locality or the chart's comments:\n%s", cm.text)
	}
}

// TestRenderRefusesBadValues: the chart's schema answers, as it does to Helm.
func TestRenderRefusesBadValues(t *testing.T) {
	if _, err := render(valueOptions{values: []string{"replicas=0"}}, "dns"); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("replicas=0: %v", err)
	}
}

func TestValuesFilesMergeInHelmsOrder(t *testing.T) {
	dir := t.TempDir()
	testkit.Must(t, os.WriteFile(dir+"/a.yaml", []byte("replicas: 2\nwriter: {enabled: false}\n"), 0o644))
	testkit.Must(t, os.WriteFile(dir+"/b.yaml", []byte("writer: {serviceImports: false}\n"), 0o644))
	v, err := valueOptions{files: []string{dir + "/a.yaml", dir + "/b.yaml"}, values: []string{"replicas=3"}, stringValues: []string{"clusterName=007"}}.merge(nil)
	testkit.Must(t, err)
	w := v["writer"].(map[string]any)
	if v["replicas"] != int64(3) || w["enabled"] != false || w["serviceImports"] != false || v["clusterName"] != "007" {
		t.Errorf("merged values: %v", v)
	}
}

func TestGlobalConfig(t *testing.T) {
	c, err := globalConfig("Corefile", `global:5353 clusterset.local:5353 {
    ready :8181
    global {
        cluster {$CLUSTER_NAME}
        locality east zone=us-east-1a region=us-east-1
        topology region
        endpointslices off
        lease dns writer
        namespaces db web
    }
}
`)
	testkit.Must(t, err)
	if !slices.Equal(c.Zones, []string{"global.", "clusterset.local."}) || c.Writer || c.LeaseNamespace != "dns" || c.LeaseName != "writer" ||
		!slices.Equal(c.Namespaces, []string{"db", "web"}) || c.Localities["east"][contract.ZoneKey] != "us-east-1a" || !slices.Equal(c.Topology, []string{contract.RegionKey}) {
		t.Errorf("%+v", c)
	}
	c, err = globalConfig("Corefile", ".:53 {\n    global near.global global\n}\n")
	testkit.Must(t, err)
	if !slices.Equal(c.Zones, []string{"near.global.", "global."}) || !c.Writer || c.LeaseName != contract.DefaultLeaseName {
		t.Errorf("%+v", c)
	}
	if _, err := globalConfig("Corefile", ".:53 {\n    forward . 1.1.1.1\n}\n"); err == nil {
		t.Error("a Corefile without the plugin parses")
	}
}

// TestNodeLocalForwards reads NodeLocal DNSCache's own Corefile (kubernetes
// cluster/addons/dns/nodelocaldns/nodelocaldns.yaml), with and without a block for the zone.
func TestNodeLocalForwards(t *testing.T) {
	const stock = `cluster.local:53 {
    errors
    cache {
            success 9984 30
            denial 9984 5
    }
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__CLUSTER__DNS__ {
            force_tcp
    }
    prometheus :9253
    health __PILLAR__LOCAL__DNS__:8080
    }
.:53 {
    errors
    cache 30
    reload
    loop
    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__
    forward . __PILLAR__UPSTREAM__SERVERS__
    prometheus :9253
    }
`
	for _, c := range []struct {
		extra, zone, says string
	}{
		{"", "global.", "no server block"},
		{"global:53 {\n    forward . 10.96.12.34\n}\n", "global.", ""},
		{"global:53 {\n    forward . 10.96.12.34\n}\n", "near.global.", ""},
		{"global:53 {\n    cache 30\n}\n", "global.", "does not forward"},
		{"global:53 {\n    forward . /etc/resolv.conf\n}\n", "global.", "upstream"},
		{"global:53 {\n    forward . 10.96.12.34\n}\n", "clusterset.local.", "no server block"},
	} {
		blocks, err := parseCorefile("Corefile", stock+c.extra)
		testkit.Must(t, err)
		got := nodeLocalForwards(blocks, c.zone)
		if (c.says == "") != (got == "") || !strings.Contains(got, c.says) {
			t.Errorf("%q for %s: %q, want %q", c.extra, c.zone, got, c.says)
		}
	}
}

// TestCheckOutput: the table as linkerd check prints it, and JSON as it parses it; a warning
// leaves success true, a fatal failure stops the run, a skipped check is not listed.
func TestCheckOutput(t *testing.T) {
	cats := []category{
		{"one", []checker{
			{description: "passes", check: func(context.Context) error { return nil }},
			{description: "skipped", check: func(context.Context) error { return errSkip }},
			{description: "warns", hintAnchor: "w", warning: true, check: func(context.Context) error { return errors.New("careful") }},
		}},
		{"two", []checker{{description: "fails", hintAnchor: "f", fatal: true, check: func(context.Context) error { return errors.New("broken\nsecond line") }}}},
		{"three", []checker{{description: "never runs", check: func(context.Context) error { return nil }}}},
	}
	var b bytes.Buffer
	if runChecks(t.Context(), &b, tableOutput, time.Now(), cats) {
		t.Error("success")
	}
	want := "one\n---\n√ passes\n‼ warns\n    careful\n    see " + hintBase + "w for hints\n\ntwo\n---\n× fails\n    broken\n    second line\n    see " + hintBase + "f for hints\n\nStatus check results are ×\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	runChecks(t.Context(), &b, jsonOutput, time.Now(), cats[:1])
	var out checkOutput
	testkit.Must(t, json.Unmarshal(b.Bytes(), &out))
	if !out.Success || len(out.Categories) != 1 || len(out.Categories[0].Checks) != 2 || out.Categories[0].Checks[1].Result != "warning" {
		t.Errorf("json:\n%s", b.String())
	}
}

// TestKubernetesVersionCheck: a minor release outside the tested range is warned of, one inside
// passes, and a build that does not know its range skips the check.
func TestKubernetesVersionCheck(t *testing.T) {
	defer func(v string) { kubernetesTested = v }(kubernetesTested)
	for _, tc := range []struct {
		tested, server string
		want           error // nil: passes; errSkip; else any other error
	}{
		{"v1.30.14 v1.37.2", "v1.30.0", nil},
		{"v1.30.14 v1.37.2", "v1.37.9+k3s1", nil},
		{"v1.30.14 v1.37.2", "v1.38.0", errors.New("warned")},
		{"v1.30.14 v1.37.2", "v1.29.15-eks-1234", errors.New("warned")},
		{"", "v1.38.0", errSkip},
	} {
		kubernetesTested = tc.tested
		hc := &healthChecker{server: &k8sversion.Info{GitVersion: tc.server}}
		err := hc.checkKubernetesVersion(context.Background())
		if (err == nil) != (tc.want == nil) || (tc.want == errSkip) != errors.Is(err, errSkip) {
			t.Errorf("tested %q, server %s: %v", tc.tested, tc.server, err)
		}
	}
}

// TestHintsHaveSections: every check's hint is a section of docs/troubleshooting.md, whose
// heading is the anchor alone (GitHub's anchor is the heading's text).
func TestHintsHaveSections(t *testing.T) {
	doc, err := os.ReadFile("../../docs/troubleshooting.md")
	testkit.Must(t, err)
	hc := &healthChecker{flags: &globalFlags{}, opts: &checkOptions{}}
	for _, cat := range append(hc.categories(), hc.preCategories()...) {
		for _, c := range cat.checkers {
			if !regexp.MustCompile("(?m)^#+ `" + regexp.QuoteMeta(c.hintAnchor) + "`$").Match(doc) {
				t.Errorf("%s: docs/troubleshooting.md has no heading `%s`", c.description, c.hintAnchor)
			}
		}
	}
}

// TestRenderKeepsTheChartsNamespaces: with namespaces, the Roles the chart places in the watched
// namespaces stay there; the rest goes into the extension's.
func TestRenderKeepsTheChartsNamespaces(t *testing.T) {
	ms, err := render(valueOptions{values: []string{"image.repository=example.com/coredns-global,namespaces={db}"}}, "dns")
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]string{}
	for _, o := range objects(t, ms) {
		meta := o["metadata"].(map[string]any)
		if ns, ok := meta["namespace"].(string); ok {
			placed[o["kind"].(string)+"/"+meta["name"].(string)+" "+ns] = ns
		}
	}
	for _, want := range []string{"Role/coredns-global db", "RoleBinding/coredns-global db", "Role/coredns-global-lease dns", "Deployment/coredns-global dns"} {
		if placed[want] == "" {
			t.Errorf("no %s: %v", want, placed)
		}
	}
}

// TestChartKinds: uninstall looks for every kind a template of the chart writes.
func TestChartKinds(t *testing.T) {
	kinds, err := chartKinds()
	testkit.Must(t, err)
	written := map[string]bool{}
	names, err := fs.Glob(deploy.Chart(), "templates/*.yaml")
	testkit.Must(t, err)
	for _, name := range names {
		data, err := fs.ReadFile(deploy.Chart(), name)
		testkit.Must(t, err)
		for _, m := range regexp.MustCompile(`(?m)^kind: (\w+)$`).FindAllStringSubmatch(string(data), -1) {
			written[m[1]] = true
		}
	}
	var got []string
	for _, k := range kinds {
		got = append(got, k.Kind)
	}
	if len(got) != len(written) || len(got) < 12 {
		t.Errorf("chartKinds %v; the templates write %v", kinds, written)
	}
	for _, k := range got {
		if !written[k] {
			t.Errorf("chartKinds has %s, which no template writes", k)
		}
	}
}

// TestBuildChart: a build's chart (what make release packages and install renders) carries the
// build's version and runs its image; the chart as it is requires an image.
func TestBuildChart(t *testing.T) {
	files, err := deploy.BuildChart("1.2.3-4-gabcdef0", "registry.example.com:5000/dns/coredns-global:1.2.3-4-gabcdef0")
	testkit.Must(t, err)
	c, err := chartOf(files)
	testkit.Must(t, err)
	if c.Metadata.Version != "1.2.3-4-gabcdef0" || c.Metadata.AppVersion != "1.2.3-4-gabcdef0" {
		t.Errorf("Chart.yaml: version %q, appVersion %q", c.Metadata.Version, c.Metadata.AppVersion)
	}
	img := c.Values["image"].(map[string]any)
	if img["repository"] != "registry.example.com:5000/dns/coredns-global" || img["tag"] != "1.2.3-4-gabcdef0" || img["pullPolicy"] != "IfNotPresent" {
		t.Errorf("values image: %v", img)
	}
	for _, bad := range []string{"registry.example.com:5000/coredns-global", "coredns-global", ":1.2.3"} {
		if _, err := deploy.BuildChart("1.2.3", bad); err == nil {
			t.Errorf("image %q: no error", bad)
		}
	}
}
