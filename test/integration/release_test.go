package integration

import (
	"bufio"
	"context"
	"debug/elf"
	"debug/macho"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// releaseDir is where `make release-files` (which make test and make release run) wrote this
// build's release.
func releaseDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GLOBAL_RELEASE_DIR")
	if st, err := os.Stat(dir); dir == "" || err != nil || !st.IsDir() {
		t.Fatalf("GLOBAL_RELEASE_DIR=%q is no release: run `make release` (make test makes one of its own)", dir)
	}
	return dir
}

// releasePlatforms are the platforms the release was built for, as make says: the image's
// architectures (linux) and the CLI's platforms.
func releasePlatforms(t *testing.T) (images, clis []string) {
	t.Helper()
	for _, a := range strings.Fields(os.Getenv("GLOBAL_IMAGE_ARCHS")) {
		images = append(images, "linux/"+a)
	}
	clis = strings.Fields(os.Getenv("GLOBAL_CLI_PLATFORMS"))
	if !slices.Contains(images, "linux/amd64") || !slices.Contains(clis, "linux/amd64") {
		t.Fatalf("GLOBAL_IMAGE_ARCHS=%q and GLOBAL_CLI_PLATFORMS=%q, each with linux/amd64, name what was built: run the tests with make",
			os.Getenv("GLOBAL_IMAGE_ARCHS"), os.Getenv("GLOBAL_CLI_PLATFORMS"))
	}
	return images, clis
}

// TestRelease reads `make release`'s directory as an operator receives it: SHA256SUMS covers every
// file and matches; the image is this build's; each binary is of its platform and says this
// version (every platform make built: make test's linux/amd64, make release's all); the packaged chart renders this build's image, as the CLI does; each binary has a
// CycloneDX SBOM listing the modules linked into it; the changelog's section is there.
func TestRelease(t *testing.T) {
	t.Parallel()
	dir := releaseDir(t)
	cur := thisBuild(t)
	v := cur.version

	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	testkit.Must(t, err)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: %q", sc.Text())
		}
		sums[name] = sum
	}
	f.Close()
	entries, err := os.ReadDir(dir)
	testkit.Must(t, err)
	var files []string
	for _, e := range entries {
		if e.Name() == "SHA256SUMS" {
			continue
		}
		files = append(files, e.Name())
		if sum := fileSHA256(t, filepath.Join(dir, e.Name())); sums[e.Name()] != sum {
			t.Errorf("SHA256SUMS: %s is %s, listed %q", e.Name(), sum, sums[e.Name()])
		}
	}
	if len(sums) != len(files) {
		t.Errorf("SHA256SUMS lists %d files, the directory has %d others", len(sums), len(files))
	}

	binaries := map[string]string{} // file -> platform
	images, clis := releasePlatforms(t)
	for _, p := range images {
		binaries["coredns-"+v+"-"+strings.ReplaceAll(p, "/", "-")] = p
	}
	for _, p := range clis {
		binaries["linkerd-global-"+v+"-"+strings.ReplaceAll(p, "/", "-")] = p
	}
	want := []string{"coredns-global-" + v + ".oci.tar", "coredns-global-" + v + ".tgz", "CHANGELOG.md"}
	for bin, platform := range binaries {
		want = append(want, bin, bin+".cdx.json")
		if got := platformOf(t, filepath.Join(dir, bin)); got != platform {
			t.Errorf("%s is a %s binary", bin, got)
		}
		checkSBOM(t, filepath.Join(dir, bin+".cdx.json"), v, strings.HasPrefix(bin, "linkerd-global"))
	}
	slices.Sort(want)
	slices.Sort(files)
	if !slices.Equal(files, want) {
		t.Errorf("the release holds %v, want %v", files, want)
	}
	if img := imageName(t, filepath.Join(dir, "coredns-global-"+v+".oci.tar")); img != cur.image {
		t.Errorf("the release's image is %s, this build's %s", img, cur.image)
	}
	out, err := exec.Command(filepath.Join(dir, "linkerd-global-"+v+"-linux-amd64"), "version", "--client", "--short").Output()
	if err != nil || strings.TrimSpace(string(out)) != v {
		t.Errorf("the release's CLI says %q (%v), want %s", out, err, v)
	}
	out, err = exec.Command(filepath.Join(dir, "coredns-"+v+"-linux-amd64"), "-version").Output()
	if err != nil || !strings.Contains(string(out), "CoreDNS-1.15.0") || !strings.Contains(string(out), v) {
		t.Errorf("the release's coredns says %q (%v), want CoreDNS-1.15.0 and %s", out, err, v)
	}
	notes := readFile(t, filepath.Join(dir, "CHANGELOG.md"))
	if !strings.HasPrefix(notes, "# coredns-global "+v+"\n\n") || !strings.Contains(notes, "### Upgrade notes") {
		t.Errorf("the release's CHANGELOG.md:\n%s", notes)
	}

	// The packaged chart: this version, this image, with no value set.
	text := harness.RunHelm(t, helms(t)["helm4"], nil, "template", "coredns-global", filepath.Join(dir, "coredns-global-"+v+".tgz"), "--namespace", "coredns-global",
		"--kube-version", strings.TrimPrefix(kubernetesVersion(t), "v"))
	d := as[appsv1.Deployment](t, objectsOf(t, text)["Deployment/coredns-global"])
	// A label value has no +: the version's build metadata is joined by _, as Helm names a chart's.
	label := strings.ReplaceAll(v, "+", "_")
	if img := d.Spec.Template.Spec.Containers[0].Image; img != cur.image || d.Labels["app.kubernetes.io/version"] != label || d.Labels["helm.sh/chart"] != "coredns-global-"+label {
		t.Errorf("the packaged chart runs %s, labels %v; want %s, version %s", img, d.Labels, cur.image, label)
	}
}

// platformOf is the os/arch an executable is built for.
func platformOf(t *testing.T, path string) string {
	t.Helper()
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		return "linux/" + map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	}
	f, err := macho.Open(path)
	if err != nil {
		t.Fatalf("%s is neither ELF nor Mach-O: %v", path, err)
	}
	defer f.Close()
	return "darwin/" + map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
}

// checkSBOM: path is a CycloneDX JSON SBOM of a build of this module at version v, listing the
// modules linked in, each with its version and hash.
func checkSBOM(t *testing.T, path, v string, cli bool) {
	t.Helper()
	var bom struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Metadata    struct {
			Component struct{ Name, Version string } `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name, Version string
			Hashes        []struct{ Alg, Content string } `json:"hashes"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(readFile(t, path)), &bom); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	modules := map[string]string{}
	hashed := 0
	for _, c := range bom.Components {
		modules[c.Name] = c.Version
		if len(c.Hashes) > 0 {
			hashed++
		}
	}
	need := []string{"github.com/coredns/coredns", "github.com/miekg/dns", "k8s.io/client-go"}
	main := "github.com/globaldns/global"
	if cli {
		need, main = []string{"helm.sh/helm/v3", "github.com/spf13/cobra", "k8s.io/client-go"}, "globaldns/deploy/linkerd-global"
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != main || bom.Metadata.Component.Version != v || hashed < len(bom.Components)/2 {
		t.Errorf("%s: %s %s of %s %s, %d of %d components hashed", path, bom.BOMFormat, bom.SpecVersion, bom.Metadata.Component.Name, bom.Metadata.Component.Version, hashed, len(bom.Components))
	}
	for _, m := range need {
		if !strings.HasPrefix(modules[m], "v") {
			t.Errorf("%s lists no %s: %d components", path, m, len(modules))
		}
	}
}

// renderCase is one way to set the chart's values, as flags both Helm and the CLI take.
type renderCase struct {
	name  string
	flags []string
}

// documented are values.yaml's values other than booleans (each flipped by itself), each set as its
// comment documents it (or, without an example, to a value of its kind). TestCLIRendersTheChart
// fails for a value of values.yaml missing here.
var documented = map[string][]string{
	"clusterName":                        {"--set", "clusterName=east"},
	"localities":                         {"--set-json", `localities={"east":{"zone":"us-east-1a","region":"us-east-1"},"west":{"zone":"us-east-1b","region":"us-east-1"}}`},
	"topology":                           {"--set", "topology={zone,region}"},
	"zones":                              {"--set", "zones={global,clusterset.local}", "--set", "mcsZones={clusterset.local}"},
	"namespaces":                         {"--set", "namespaces={db,shop}"},
	"mcsZones":                           {"--set", "zones={global,clusterset.local}", "--set", "mcsZones={clusterset.local}"},
	"policy.default":                     {"--set", "policy.default=nearest 2"},
	"policy.byZone":                      {"--set", "zones={global,near.global}", "--set", "policy.byZone.near\\.global=nearest"},
	"clientLocality.sources":             {"--set", "clientLocality.sources={ecs,node,pod}", "--set", "clientLocality.ecsFrom={dns/ecs}"},
	"clientLocality.ecsFrom":             {"--set", "clientLocality.sources={ecs}", "--set", "clientLocality.ecsFrom={dns/ecs,10.0.0.0/8}"},
	"explain.from":                       {"--set", "explain.from={127.0.0.0/8,::1/128,10.0.0.0/8}"},
	"linkerd.multiclusterNamespace":      {"--set", "linkerd.multiclusterNamespace=lmc"},
	"clientLocality.forwarders":          {"--set", "clientLocality.sources={node}", "--set", "clientLocality.forwarders={kube-system/kube-dns,kube-system/node-local-dns}"},
	"writer.serviceSuffix":               {"--set", "writer.serviceSuffix=-all"},
	"extraConfig.plugin":                 {"--set", "extraConfig.plugin=ttl 10"},
	"extraConfig.server":                 {"--set", "extraConfig.server=log"},
	"image.repository":                   {"--set", "image.repository=registry.example.com/coredns-global"},
	"image.tag":                          {"--set", "image.tag=1.2.3"},
	"image.digest":                       {"--set", "image.digest=sha256:" + strings.Repeat("ab", 32)},
	"image.pullPolicy":                   {"--set", "image.pullPolicy=Always"},
	"imagePullSecrets":                   {"--set-json", `imagePullSecrets=[{"name":"registry"}]`},
	"tests.image":                        {"--set", "tests.image=registry.example.com/dig:1"},
	"tests.name":                         {"--set", "tests.name=foo.db.global"},
	"replicas":                           {"--set", "replicas=2"},
	"strategy":                           {"--set-json", `strategy={"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1,"maxSurge":0}}`},
	"priorityClass.value":                {"--set", "priorityClass.create=true,priorityClass.value=1000"},
	"priorityClass.name":                 {"--set", "priorityClass.name=system-cluster-critical"},
	"podDisruptionBudget.maxUnavailable": {"--set", "podDisruptionBudget.enabled=true,podDisruptionBudget.maxUnavailable=50%"},
	"resources":                          {"--set-json", `resources={"requests":{"cpu":"200m","memory":"128Mi"},"limits":{"memory":"1Gi"}}`},
	"podAntiAffinity":                    {"--set", "podAntiAffinity=node"},
	"affinity":                           {"--set-json", `affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/os","operator":"In","values":["linux"]}]}]}}}`},
	"nodeSelector":                       {"--set", "nodeSelector.kubernetes\\.io/os=linux"},
	"tolerations":                        {"--set-json", `tolerations=[{"key":"dedicated","operator":"Equal","value":"dns","effect":"NoSchedule"}]`},
	"topologySpreadConstraints":          {"--set-json", `topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"coredns-global"}}}]`},
	"podAnnotations":                     {"--set", "podAnnotations.example\\.com/team=dns"},
	"podLabels":                          {"--set", "podLabels.team=dns"},
	"service.clusterIP":                  {"--set", "service.clusterIP=10.96.0.99"},
	"networkPolicy.metrics.namespace":    {"--set", "networkPolicy.enabled=true,networkPolicy.metrics.namespace=prometheus"},
	"networkPolicy.metrics.namespaceSelector": {"--set", "networkPolicy.enabled=true", "--set-json", `networkPolicy.metrics.namespaceSelector={"matchLabels":{"team":"observability"}}`},
	"networkPolicy.metrics.podSelector":       {"--set", "networkPolicy.enabled=true", "--set-json", `networkPolicy.metrics.podSelector={"matchLabels":{"app.kubernetes.io/name":"prometheus"}}`},
	"monitoring.serviceMonitor.interval":      {"--set", "monitoring.serviceMonitor.enabled=true,monitoring.serviceMonitor.interval=15s"},
	"monitoring.serviceMonitor.labels":        {"--set", "monitoring.serviceMonitor.enabled=true,monitoring.serviceMonitor.labels.release=prometheus"},
	"monitoring.prometheusRule.labels":        {"--set", "monitoring.prometheusRule.enabled=true,monitoring.prometheusRule.labels.release=prometheus"},
	"monitoring.dashboard.labels":             {"--set", "monitoring.dashboard.enabled=true", "--set-string", "monitoring.dashboard.labels.grafana_dashboard=2"},
	"nameOverride":                            {"--set", "nameOverride=dns"},
	"fullnameOverride":                        {"--set", "fullnameOverride=global-dns"},
}

// renderCases are the defaults, values-ha.yaml, each boolean of values.yaml flipped, each value of
// documented, and all the booleans on at once.
func renderCases(t *testing.T) []renderCase {
	t.Helper()
	var values map[string]any
	testkit.Must(t, yaml.Unmarshal([]byte(readFile(t, chartPath(t, "values.yaml"))), &values))
	cases := []renderCase{{"defaults", nil}, {"values-ha.yaml", []string{"--values", chartPath(t, "values-ha.yaml")}}}
	var all []string
	var leaves func(prefix string, m map[string]any)
	leaves = func(prefix string, m map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			path := prefix + k
			if b, ok := m[k].(bool); ok {
				set := fmt.Sprintf("%s=%t", path, !b)
				cases = append(cases, renderCase{set, []string{"--set", set}})
				if !b {
					all = append(all, set)
				}
				continue
			}
			if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 && documented[path] == nil {
				leaves(path+".", sub)
				continue
			}
			if documented[path] == nil {
				t.Errorf("values.yaml's %s has no documented value in this test: add one", path)
				continue
			}
			cases = append(cases, renderCase{path, documented[path]})
		}
	}
	leaves("", values)
	return append(cases, renderCase{"every boolean on", []string{"--set", strings.Join(all, ",")}})
}

// TestCLIRendersTheChart: for every value of values.yaml, `linkerd global install` renders what
// Helm renders of the release's packaged chart, object for object (Helm's managed-by label aside,
// and the labelled Namespace the CLI adds); every object the chart can render is placed as the API
// serves its kind (namespaced ones in the extension's namespace); with every boolean on, the API
// server takes the CLI's output (a server-side dry run).
func TestCLIRendersTheChart(t *testing.T) {
	t.Parallel()
	v := thisBuild(t).version
	chart := filepath.Join(releaseDir(t), "coredns-global-"+v+".tgz")
	helm := helms(t)["helm4"]
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client().Discovery()))
	kinds := map[string]bool{}
	for _, c := range renderCases(t) {
		cliText, stderr, code := cli(t, nil, "", append([]string{"install"}, c.flags...)...)
		if code != 0 {
			t.Errorf("%s: install: %s", c.name, stderr)
			continue
		}
		helmText, err := harness.TryHelm(t, helm, nil, append([]string{"template", "coredns-global", chart, "--namespace", "coredns-global", "--skip-tests",
			"--kube-version", strings.TrimPrefix(kubernetesVersion(t), "v")}, c.flags...)...)
		if err != nil {
			t.Errorf("%s: helm template: %v", c.name, err)
			continue
		}
		got, want := objectsOf(t, cliText), objectsOf(t, helmText)
		if ns := got["Namespace/coredns-global"]; ns == nil || ns.GetLabels()["linkerd.io/extension"] != "global" {
			t.Errorf("%s: no labelled Namespace: %v", c.name, ns)
		}
		delete(got, "Namespace/coredns-global")
		for key, u := range got {
			kinds[u.GetKind()] = true
			checkPlaced(t, mapper, c.name, u)
			w := want[key]
			if w == nil {
				t.Errorf("%s: the CLI renders %s, Helm does not", c.name, key)
				continue
			}
			if labels := w.GetLabels(); labels["app.kubernetes.io/managed-by"] == "Helm" {
				labels["app.kubernetes.io/managed-by"] = "linkerd-global"
				w.SetLabels(labels)
			}
			if !reflect.DeepEqual(u.Object, w.Object) {
				g, _ := yaml.Marshal(u.Object)
				wy, _ := yaml.Marshal(w.Object)
				t.Errorf("%s: %s differs:\n%s\nHelm:\n%s", c.name, key, g, wy)
			}
			delete(want, key)
		}
		for key := range want {
			t.Errorf("%s: Helm renders %s, the CLI does not", c.name, key)
		}
		if c.name == "every boolean on" {
			// The API server takes every object, but those of the Prometheus Operator's CRDs, which
			// the test control plane lacks (checkPlaced has their scope).
			testkit.Must(t, harness.EnsureNamespace(context.Background(), client(), "coredns-global"))
			var served []string
			for _, doc := range strings.Split(cliText, "\n---\n") {
				if !strings.Contains(doc, "\napiVersion: monitoring.coreos.com/") && !strings.HasPrefix(doc, "apiVersion: monitoring.coreos.com/") {
					served = append(served, doc)
				}
			}
			harness.RunKubectl(t, cp, strings.Join(served, "\n---\n"), "apply", "-f", "-", "--dry-run=server")
		}
	}
	if len(kinds) < 14 {
		t.Errorf("the cases rendered only %v", kinds)
	}
}

// checkPlaced: u has a namespace exactly when the API serves its kind namespaced; kinds of CRDs
// the test control plane lacks (the Prometheus Operator's) are namespaced, as their CRDs say.
func checkPlaced(t *testing.T, mapper meta.RESTMapper, name string, u *unstructured.Unstructured) {
	t.Helper()
	gvk := u.GroupVersionKind()
	namespaced := gvk.Group == "monitoring.coreos.com" // monitoring.coreos.com_servicemonitors.yaml, _prometheusrules.yaml: scope Namespaced
	if m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
	} else if !meta.IsNoMatchError(err) || !namespaced {
		t.Errorf("%s: %s: %v", name, gvk, err)
	}
	switch ns := u.GetNamespace(); {
	case namespaced && ns == "":
		t.Errorf("%s: %s %s has no namespace: kubectl would put it in the kubeconfig's", name, u.GetKind(), u.GetName())
	case !namespaced && ns != "":
		t.Errorf("%s: %s %s is cluster-scoped, and placed in %s", name, u.GetKind(), u.GetName(), ns)
	}
}
