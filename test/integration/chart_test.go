package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/stanza"
	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// helms are the Helm CLIs the chart must work with, by name.
func helms(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, env := range map[string]string{"helm3": harness.EnvHelm3Bin, "helm4": harness.EnvHelm4Bin} {
		bin, err := harness.Built(env, "helm")
		testkit.Must(t, err)
		out[name] = bin
	}
	return out
}

func chartPath(t *testing.T, file string) string {
	t.Helper()
	return repoPath(t, "deploy/chart", file)
}

// imageRepository is where `make image` names the image (its default IMAGE), as a user who loaded
// it sets image.repository; deploy/base runs it.
const imageRepository = "ghcr.io/globaldns/coredns-global"

// renderFlags are what every render needs: an image repository (none is published, so the chart
// requires one) and the Kubernetes release make test runs (Helm 3 built from source assumes 1.20,
// older than the chart's kubeVersion; an install asks the API server).
func renderFlags(t *testing.T) []string {
	return []string{"--set", "image.repository=" + imageRepository, "--kube-version", strings.TrimPrefix(kubernetesVersion(t), "v")}
}

// helmTemplate renders the chart as release coredns-global in namespace coredns-global, with the
// image repository set: the release's objects, without `helm test`'s pod (TestRunbooks runs it).
func helmTemplate(t *testing.T, helm string, args ...string) (string, map[string]*unstructured.Unstructured) {
	t.Helper()
	args = append(append([]string{"template", "coredns-global", chartPath(t, ""), "--namespace", "coredns-global", "--skip-tests"}, renderFlags(t)...), args...)
	out := harness.RunHelm(t, helm, nil, args...)
	return out, objectsOf(t, out)
}

// helmBookkeeping are what Helm adds and kustomize has no use for: its release labels, and the
// Corefile's checksum that rolls the pods when only the ConfigMap changed.
var helmBookkeeping = map[string]bool{
	"helm.sh/chart": true, "app.kubernetes.io/managed-by": true, "app.kubernetes.io/instance": true,
	"app.kubernetes.io/version": true, "checksum/corefile": true,
}

// withoutBookkeeping strips Helm's bookkeeping (wherever a label or selector holds it), the namespace
// (kustomize sets it, Helm installs into the release's) and maps left empty.
func withoutBookkeeping(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if helmBookkeeping[k] || k == "namespace" && reflect.TypeOf(x).Kind() == reflect.String && isMeta(v) {
				continue
			}
			if x = withoutBookkeeping(x); x != nil {
				out[k] = x
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = withoutBookkeeping(x)
		}
		return out
	}
	return v
}

// isMeta tells an object's metadata (with a name) from a subject, whose namespace matters.
func isMeta(m map[string]any) bool { _, kind := m["kind"]; _, name := m["name"]; return name && !kind }

// TestChartRendersTheKustomizations: deploy/chart's defaults render deploy/base's objects, and
// values-ha.yaml deploy/overlays/ha's, object by object but for Helm's bookkeeping; Helm 3 and 4
// render the same; both lint it clean; the API server accepts every object.
func TestChartRendersTheKustomizations(t *testing.T) {
	t.Parallel()
	testkit.Must(t, harness.EnsureNamespace(context.Background(), client(), "coredns-global"))
	for _, c := range []struct{ kustomization, values string }{
		{"deploy/base", ""},
		{"deploy/overlays/ha", "values-ha.yaml"},
	} {
		_, want := kustomize(t, c.kustomization)
		// The chart leaves the namespace to `helm install --create-namespace`, as charts do.
		delete(want, "Namespace/coredns-global")
		// Kustomize names the ConfigMap by a hash of the Corefile, the chart rolls the pods by an
		// annotation of it: bookkeeping both.
		cm := want["ConfigMap/coredns-global"]
		if cm == nil || cm.GetName() == "coredns-global" {
			t.Fatalf("%s generates no ConfigMap coredns-global-<hash>: %v", c.kustomization, cm)
		}
		hashed := cm.GetName()
		cm = cm.DeepCopy()
		cm.SetName("coredns-global")
		want["ConfigMap/coredns-global"] = cm
		d := want["Deployment/coredns-global"].DeepCopy()
		vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			if ref, ok := v.(map[string]any)["configMap"].(map[string]any); ok && ref["name"] == hashed {
				ref["name"] = "coredns-global"
			}
		}
		testkit.Must(t, unstructured.SetNestedSlice(d.Object, vols, "spec", "template", "spec", "volumes"))
		want["Deployment/coredns-global"] = d
		var first map[string]any
		for name, helm := range helms(t) {
			args := renderFlags(t)
			if c.values != "" {
				args = append(args, "--values", chartPath(t, c.values))
			}
			harness.RunHelm(t, helm, nil, append([]string{"lint", "--strict", chartPath(t, "")}, args...)...)
			text, got := helmTemplate(t, helm, args...)
			harness.RunKubectl(t, cp, text, "apply", "-f", "-", "--server-side", "--dry-run=server", "--namespace", "coredns-global")
			rendered := map[string]any{}
			for k, u := range got {
				rendered[k] = withoutBookkeeping(u.Object)
			}
			for k, u := range want {
				w := withoutBookkeeping(u.Object)
				if !reflect.DeepEqual(rendered[k], w) {
					g, _ := yaml.Marshal(rendered[k])
					wy, _ := yaml.Marshal(w)
					t.Errorf("%s %s: %s differs from %s's:\n%s\nwant\n%s", name, c.values, k, c.kustomization, g, wy)
				}
				delete(rendered, k)
			}
			for k := range rendered {
				t.Errorf("%s %s: %s is not in %s", name, c.values, k, c.kustomization)
			}
			all := map[string]any{}
			for k, u := range got {
				all[k] = u.Object
			}
			if first == nil {
				first = all
			} else if !reflect.DeepEqual(first, all) {
				t.Errorf("%s: Helm 3 and 4 render differently", c.values)
			}
		}
	}
}

// TestChartValues: the values a platform engineer sets end up in the Corefile and the objects; the
// writer off leaves every write rule out; monitoring ships deploy/monitoring's files as they are.
func TestChartValues(t *testing.T) {
	// Serial: it starts the chart's Corefile, whose writer writes in every namespace.
	helm := helms(t)["helm4"]
	_, objs := helmTemplate(t, helm,
		"--set", "clusterName=east,zones={global,clusterset.local},mcsZones={clusterset.local},policy.default=nearest 2",
		"--set", "policy.byZone.global=all,writer.serviceImports=true,writer.serviceSuffix=-all,replicas=2,service.clusterIP=10.96.0.99",
		"--set-json", `localities={"east":{"zone":"us-east-1a","region":"us-east-1"},"west":{"zone":"us-east-1b"}}`,
		"--set", "extraConfig.server=log,extraConfig.plugin=ttl 10",
		"--set", "monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
		"--set", "clientLocality.sources={node,pod},clientLocality.forwarders={kube-system/coredns}")
	corefile := corefileOf(objs)
	for _, line := range []string{
		"global:5353 clusterset.local:5353 {", "    bufsize 1232\n", "    log\n", "global global clusterset.local {", "cluster {$CLUSTER_NAME}",
		"locality east region=us-east-1 zone=us-east-1a", "locality west zone=us-east-1b", "names mcs clusterset.local",
		"policy nearest 2\n", "policy all global\n", "serviceimports on", "service_suffix -all\n", "        ttl 10\n",
		"owner clusterroles.rbac.authorization.k8s.io coredns-global-write\n",
		"client_locality node pod\n", "client_forwarders kube-system/coredns\n",
	} {
		if !strings.Contains(corefile, line) {
			t.Errorf("the Corefile has no %q:\n%s", line, corefile)
		}
	}
	if strings.Contains(corefile, "lease ") || strings.Contains(corefile, "For example") {
		t.Errorf("the Corefile:\n%s", corefile)
	}
	// The Corefile starts: CoreDNS takes it, the plugin's own checks included.
	checkCorefileParses(t, corefile)
	// The admission policy admits the suffix the Corefile writes (TestWriterOrphansOfSuffix runs it).
	vars, _, _ := unstructured.NestedSlice(objs["ValidatingAdmissionPolicy/coredns-global-write"].Object, "spec", "variables")
	if len(vars) == 0 || vars[0].(map[string]any)["expression"] != "'-all'" {
		t.Errorf("the policy's variables: %v", vars)
	}
	if strings.Contains(readFile(t, repoPath(t, "deploy/base/Corefile")), "service_suffix") {
		t.Error("deploy/base's Corefile sets service_suffix: its policy admits -global only")
	}
	// client_locality pod reads Pods; without it, nothing does.
	readsPods := func(objs map[string]*unstructured.Unstructured) bool {
		rules, _, _ := unstructured.NestedSlice(objs["ClusterRole/coredns-global-read"].Object, "rules")
		for _, r := range rules {
			if res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources"); slices.Contains(res, "pods") {
				return true
			}
		}
		return false
	}
	if _, plain := helmTemplate(t, helm); !readsPods(objs) || readsPods(plain) {
		t.Errorf("Pods read with client_locality pod: %t; without it: %t", readsPods(objs), readsPods(plain))
	}
	if ip := objs["Service/coredns-global"].Object["spec"].(map[string]any)["clusterIP"]; ip != "10.96.0.99" {
		t.Errorf("clusterIP %v", ip)
	}

	// The ServiceMonitor scrapes the metrics Service, and only it: the DNS Service offers no metrics.
	sm := objs["ServiceMonitor/coredns-global"]
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	metricsSvc := as[corev1.Service](t, objs["Service/coredns-global-metrics"])
	if !labels.SelectorFromSet(selector).Matches(labels.Set(metricsSvc.Labels)) || labels.SelectorFromSet(selector).Matches(labels.Set(objs["Service/coredns-global"].GetLabels())) {
		t.Errorf("the ServiceMonitor selects %v; the metrics Service is labelled %v, the DNS Service %v", selector, metricsSvc.Labels, objs["Service/coredns-global"].GetLabels())
	}
	if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "metrics" || len(metricsSvc.Spec.Ports) != 1 || metricsSvc.Spec.Ports[0].Name != "metrics" {
		t.Errorf("the ServiceMonitor: %v; the metrics Service's ports %v", sm.Object["spec"], metricsSvc.Spec.Ports)
	}

	rules, err := os.ReadFile(chartPath(t, "../monitoring/rules.yaml"))
	testkit.Must(t, err)
	var wantRules map[string]any
	testkit.Must(t, yaml.Unmarshal(rules, &wantRules))
	if spec := objs["PrometheusRule/coredns-global"].Object["spec"]; !reflect.DeepEqual(spec, wantRules) {
		t.Errorf("the PrometheusRule's spec is not deploy/monitoring/rules.yaml")
	}
	dashboard, err := os.ReadFile(chartPath(t, "../monitoring/dashboard.json"))
	testkit.Must(t, err)
	cm := objs["ConfigMap/coredns-global-dashboard"]
	if got := cm.Object["data"].(map[string]any)["coredns-global.json"]; got != string(dashboard) || cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap: labels %v, data equal %t", cm.GetLabels(), got == string(dashboard))
	}
	var d map[string]any
	testkit.Must(t, json.Unmarshal(dashboard, &d))

	// Writer off: DNS only, and no write rule, no Lease rule.
	_, objs = helmTemplate(t, helm, "--set", "writer.enabled=false")
	if c := corefileOf(objs); !strings.Contains(c, "endpointslices off") || strings.Contains(c, "owner ") {
		t.Errorf("writer off, the Corefile:\n%s", c)
	}
	for _, k := range []string{"ClusterRole/coredns-global-write", "ClusterRoleBinding/coredns-global-write", "Role/coredns-global-lease", "RoleBinding/coredns-global-lease",
		"ValidatingAdmissionPolicy/coredns-global-write", "ValidatingAdmissionPolicyBinding/coredns-global-write"} {
		if objs[k] != nil {
			t.Errorf("writer off renders %s", k)
		}
	}
	if objs["ClusterRole/coredns-global-read"] == nil {
		t.Error("writer off renders no read rules")
	}

	// Another release's objects and Lease are its own.
	_, objs = helmTemplate(t, helm, "--set", "fullnameOverride=dns2")
	c := objs["ConfigMap/dns2"].Object["data"].(map[string]any)["Corefile"].(string)
	role := objs["Role/dns2-lease"].Object["rules"].([]any)[1].(map[string]any)["resourceNames"].([]any)
	if !strings.Contains(c, "lease coredns-global dns2-writer") || role[0] != "dns2-writer" || !strings.Contains(c, "owner clusterroles.rbac.authorization.k8s.io dns2-write\n") {
		t.Errorf("release dns2: lease rule %v, Corefile:\n%s", role, c)
	}
	conds, _, _ := unstructured.NestedSlice(objs["ValidatingAdmissionPolicy/dns2-write"].Object, "spec", "matchConditions")
	if len(conds) != 1 || conds[0].(map[string]any)["expression"] != "request.userInfo.username == 'system:serviceaccount:coredns-global:dns2'" ||
		objs["ValidatingAdmissionPolicyBinding/dns2-write"].Object["spec"].(map[string]any)["policyName"] != "dns2-write" {
		t.Errorf("release dns2's admission policy: %v", conds)
	}
}

// checkCorefileParses starts bin/coredns on corefile long enough to know CoreDNS accepted it.
func checkCorefileParses(t *testing.T, corefile string) {
	t.Helper()
	c := harness.StartCoreDNS(t, cp, localize(corefile, repoPath(t)), harness.WithEnv("KUBECONFIG="+cp.Kubeconfig, "CLUSTER_NAME=east", "POD_NAMESPACE=default"))
	c.Stop()
}

// TestChartSchema: a bad value fails at install time, saying which value and why, with Helm 3 and 4.
func TestChartSchema(t *testing.T) {
	t.Parallel()
	for name, helm := range helms(t) {
		for _, c := range []struct{ set, says string }{
			{"replicas=0", "replicas"},
			{"replica=3", "replica"},
			{"clusterName=East_1", "clusterName"},
			{"policy.default=closest", "default"},
			{"policy.default=nearest 0", "default"},
			{"zones={}", "zones"},
			{"podAntiAffinity=zone", "podAntiAffinity"},
			{"writer.enabled=maybe", "enabled"},
			{"writer.serviceSuffix=_x", "serviceSuffix"},
			{"writer.serviceSuffix=-mcs", "serviceSuffix"},
			{"image.digest=0.1.0", "digest"},
			{"networkPolicy.metrics.namespaceSelector.matchLabels=monitoring", "matchLabels"},
		} {
			_, err := harness.TryHelm(t, helm, nil, append([]string{"template", "coredns-global", chartPath(t, ""), "--set", c.set}, renderFlags(t)...)...)
			if err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s --set %s: %v, want a schema error about %s", name, c.set, err, c.says)
			}
		}
	}
}

// TestChartImage: no image is published, so the chart renders only with image.repository set, and
// says how to build one otherwise; the tag is the chart's appVersion, the one `make image` gives,
// pulled only when missing (a loaded image is used as it is); kubeVersion admits what make test runs.
func TestChartImage(t *testing.T) {
	t.Parallel()
	appVersion := chartAppVersion(t)
	tested := strings.TrimPrefix(kubernetesVersion(t), "v")
	for name, helm := range helms(t) {
		_, err := harness.TryHelm(t, helm, nil, "template", "coredns-global", chartPath(t, ""), "--kube-version", tested)
		if err == nil || !strings.Contains(err.Error(), "image.repository is required") || !strings.Contains(err.Error(), "make image") ||
			!strings.Contains(err.Error(), "docs/install.md") {
			t.Errorf("%s: rendered without image.repository: %v", name, err)
		}
		digest := "sha256:" + strings.Repeat("ab", 32)
		for _, c := range []struct{ set, image string }{
			{"", imageRepository + ":" + appVersion},
			{"image.tag=v2", imageRepository + ":v2"},
			{"image.tag=v2,image.digest=" + digest, imageRepository + "@" + digest},
		} {
			args := []string{}
			if c.set != "" {
				args = append(args, "--set", c.set)
			}
			_, objs := helmTemplate(t, helm, args...)
			ctr := as[appsv1.Deployment](t, objs["Deployment/coredns-global"]).Spec.Template.Spec.Containers[0]
			if ctr.Image != c.image || ctr.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s --set %q: image %q %q, want %q IfNotPresent", name, c.set, ctr.Image, ctr.ImagePullPolicy, c.image)
			}
		}
		// The Kubernetes that make test runs is one the chart takes (every render above); one without
		// the features it needs is not.
		if _, err := harness.TryHelm(t, helm, nil, "template", "coredns-global", chartPath(t, ""), "--set", "image.repository="+imageRepository, "--kube-version", "1.29.9"); err == nil ||
			!strings.Contains(err.Error(), "kubeVersion") {
			t.Errorf("%s: rendered for Kubernetes 1.29.9: %v", name, err)
		}
	}
	// deploy/base runs the same image.
	_, base := kustomize(t, "deploy/base")
	if ctr := as[appsv1.Deployment](t, base["Deployment/coredns-global"]).Spec.Template.Spec.Containers[0]; ctr.Image != imageRepository+":"+appVersion ||
		ctr.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("deploy/base's image %q %q, want %s:%s IfNotPresent", ctr.Image, ctr.ImagePullPolicy, imageRepository, appVersion)
	}
}

// chartAppVersion is deploy/chart's appVersion, the tag of the image `make image` builds.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(chartPath(t, "Chart.yaml"))
	testkit.Must(t, err)
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	testkit.Must(t, yaml.Unmarshal(b, &chart))
	if chart.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return chart.AppVersion
}

// kubernetesVersion is the Kubernetes release the control plane is built from (make controlplane,
// or make test-k8s K8S=...), as the Makefile says it, else the pinned one.
func kubernetesVersion(t *testing.T) string {
	t.Helper()
	if v := os.Getenv("GLOBAL_KUBE_VERSION"); v != "" {
		return v
	}
	b, err := os.ReadFile(repoPath(t, "test/controlplane/kube/go.mod"))
	testkit.Must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "require" && f[1] == "k8s.io/kubernetes" {
			return f[2]
		}
	}
	t.Fatal("test/controlplane/kube/go.mod requires no k8s.io/kubernetes")
	return ""
}

// TestKubernetesRange: the chart's kubeVersion is the range `make test-k8s` passed on (the
// Makefile's K8S_TESTED, oldest and newest), no wider: Helm renders for both ends and for what make
// test runs, and refuses the release before the oldest and the one after the newest;
// docs/install.md says the same range.
func TestKubernetesRange(t *testing.T) {
	t.Parallel()
	tested := strings.Fields(os.Getenv("GLOBAL_K8S_TESTED"))
	if len(tested) != 2 {
		t.Fatalf("GLOBAL_K8S_TESTED=%q: the Makefile names the oldest and the newest release make test-k8s passed", tested)
	}
	minor := func(v string) (int, int) {
		var major, minor, patch int
		if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d.%d", &major, &minor, &patch); err != nil {
			t.Fatalf("version %q: %v", v, err)
		}
		return major, minor
	}
	oMaj, oMin := minor(tested[0])
	nMaj, nMin := minor(tested[1])
	b, err := os.ReadFile(chartPath(t, "Chart.yaml"))
	testkit.Must(t, err)
	var chart struct {
		KubeVersion string `json:"kubeVersion"`
	}
	testkit.Must(t, yaml.Unmarshal(b, &chart))
	// The oldest only: a newer Kubernetes is warned of by linkerd global check, not refused.
	if want := fmt.Sprintf(">=%d.%d.0-0", oMaj, oMin); chart.KubeVersion != want {
		t.Errorf("Chart.yaml's kubeVersion %q, want %q", chart.KubeVersion, want)
	}
	helm := helms(t)["helm4"]
	for v, ok := range map[string]bool{
		strings.TrimPrefix(tested[0], "v"): true, strings.TrimPrefix(tested[1], "v"): true, strings.TrimPrefix(kubernetesVersion(t), "v"): true,
		fmt.Sprintf("%d.%d.9", oMaj, oMin-1): false, fmt.Sprintf("%d.%d.0", nMaj, nMin+1): true,
	} {
		_, err := harness.TryHelm(t, helm, nil, "template", "coredns-global", chartPath(t, ""), "--set", "image.repository="+imageRepository, "--kube-version", v)
		if (err == nil) != ok {
			t.Errorf("helm template for Kubernetes %s: %v (want rendered: %t)", v, err, ok)
		}
	}
	if doc := readFile(t, repoPath(t, "docs/install.md")); !strings.Contains(doc, fmt.Sprintf("**Kubernetes %d.%d to %d.%d**", oMaj, oMin, nMaj, nMin)) ||
		!strings.Contains(doc, "passed on "+strings.TrimPrefix(tested[0], "v")+" and "+strings.TrimPrefix(tested[1], "v")) {
		t.Errorf("docs/install.md does not state the range tested, %s to %s", tested[0], tested[1])
	}
}

// TestChartInstall installs the chart for real, with Helm 4 (values-ha.yaml) and Helm 3 (DNS
// only), and runs bin/coredns with each release's Corefile as its ServiceAccount, so that the
// installed RBAC is all it has: both answer, the first writes, the second may not.
func TestChartInstall(t *testing.T) {
	t.Parallel()
	cp := harness.Start(t) // of its own: the releases' cluster-scoped objects
	ctx := context.Background()
	admin := cp.Client
	h := helms(t)

	const ns = "db"
	testkit.Must(t, harness.EnsureNamespace(ctx, admin, ns))
	testkit.Must(t, harness.CreateNode(ctx, admin, harness.Node{Name: "east-a", Zone: "us-east-1a", Region: "us-east-1"}))
	testkit.Must(t, harness.CreateStatefulSet(ctx, admin, harness.StatefulSet{Namespace: ns, Service: "foo", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "foo-0", Node: "east-a", IP: "10.244.1.10", Ready: true}, {Name: "foo-1", Node: "east-a", IP: "10.244.1.11", Ready: true},
	}}))
	_, err := harness.CreateMirror(ctx, admin, mirror(ns, "west", true, true))
	testkit.Must(t, err)

	// The install guide's commands, then an upgrade: the Service's address is known from then on.
	docNamespace(t, cp, "docs/install.md")
	install := docCommand(t, "docs/install.md", "helm install coredns-global ")
	notes := harness.RunHelm(t, h["helm4"], cp, install...)
	if !strings.Contains(notes, "kubectl -n coredns-global get service coredns-global") {
		t.Errorf("install notes:\n%s", notes)
	}
	svc, err := admin.CoreV1().Services("coredns-global").Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	upgrade := append([]string{"upgrade"}, install[1:]...)
	notes = harness.RunHelm(t, h["helm4"], cp, upgrade...)
	if !strings.Contains(notes, "global:53 {\n        cache\n        forward . "+svc.Spec.ClusterIP+"\n") || !strings.Contains(notes, "dig @"+svc.Spec.ClusterIP+" <svc>.<namespace>.global") ||
		!strings.Contains(notes, "port-forward deploy/coredns-global 5353 &\n    dig @127.0.0.1 -p 5353 +tcp CH TXT global") {
		t.Errorf("upgrade notes (service %s):\n%s", svc.Spec.ClusterIP, notes)
	}
	// To ecs and back to node, as install.md says: the values given before are reused, ecsFrom
	// unset with null.
	corefileNow := func() string {
		cm, err := admin.CoreV1().ConfigMaps("coredns-global").Get(ctx, "coredns-global", metav1.GetOptions{})
		testkit.Must(t, err)
		return cm.Data["Corefile"]
	}
	harness.RunHelm(t, h["helm4"], cp, append(slices.Clone(upgrade), "--reset-then-reuse-values", "--set", "clientLocality.sources={ecs}", "--set", "clientLocality.ecsFrom={10.0.0.0/8}")...)
	if c := corefileNow(); !strings.Contains(c, "client_locality ecs\n") || !strings.Contains(c, "client_ecs_from 10.0.0.0/8\n") {
		t.Errorf("upgraded to ecs, the Corefile:\n%s", c)
	}
	harness.RunHelm(t, h["helm4"], cp, docCommand(t, "docs/install.md", "helm upgrade coredns-global deploy/chart --namespace coredns-global --reset-then-reuse-values --set 'clientLocality.sources=")...)
	if c := corefileNow(); !strings.Contains(c, "client_locality node\n") || strings.Contains(c, "client_ecs_from") {
		t.Errorf("back to node, the Corefile:\n%s", c)
	}
	replicas := startRelease(t, cp, "coredns-global", "coredns-global", 2)
	for _, c := range replicas {
		harness.Eventually(t, "the local pods and west's", func() error { return answers(t, c, "foo.db.global.", 4) })
	}
	waitLeader(t, replicas...)
	harness.Eventually(t, "the written slices", func() error { return writtenSlices(t, admin, ns, map[string]int{"east": 2, "west": 2}) })

	// Helm 3, DNS only, next to it: answers, and may write nothing.
	harness.RunHelm(t, h["helm3"], cp, "install", "dns-only", chartPath(t, ""), "--namespace", "dns-only", "--create-namespace",
		"--set", "writer.enabled=false,clusterName=east,image.repository="+imageRepository)
	dnsOnly := startRelease(t, cp, "dns-only", "dns-only-coredns-global", 1)[0]
	harness.Eventually(t, "the DNS-only release's answers", func() error { return answers(t, dnsOnly, "foo.db.global.", 4) })
	if m := dnsOnly.Metric(t, "coredns_global_leader"); m != "0" {
		t.Errorf("the DNS-only release leads: %s", m)
	}
	sa := clientFor(t, kubeconfigOf(t, cp, "dns-only", "dns-only-coredns-global"))
	_, err = sa.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the DNS-only ServiceAccount may create a Service: %v", err)
	}
	if _, err := sa.CoordinationV1().Leases("dns-only").Get(ctx, "dns-only-coredns-global-writer", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the DNS-only ServiceAccount may read a Lease: %v", err)
	}

	// Uninstalled, a release leaves nothing cluster-wide behind.
	harness.RunHelm(t, h["helm4"], cp, "uninstall", "coredns-global", "--namespace", "coredns-global")
	if _, err := admin.RbacV1().ClusterRoles().Get(ctx, "coredns-global-write", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after uninstall, ClusterRole coredns-global-write: %v", err)
	}
}

// docCommand returns the arguments of the command of the Markdown file doc (relative to the
// repository) that starts with prefix, without its program name and its trailing # comment, with
// its paths made absolute and each $(make -s target) replaced by what that command prints here.
func docCommand(t *testing.T, doc, prefix string) []string {
	t.Helper()
	root := repoPath(t)
	text, err := os.ReadFile(filepath.Join(root, doc))
	testkit.Must(t, err)
	for _, line := range strings.Split(string(text), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			line, _, _ = strings.Cut(line, " #")
			line = makeCommand.ReplaceAllStringFunc(line, func(cmd string) string {
				return makePrints(t, makeCommand.FindStringSubmatch(cmd)[1])
			})
			args := strings.Fields(line)[1:]
			for i, a := range args {
				// A word the shell would unquote ('{a,b}'); the docs quote no spaces.
				if len(a) > 1 && a[0] == '\'' && a[len(a)-1] == '\'' {
					a = a[1 : len(a)-1]
					args[i] = a
				}
				if _, err := os.Stat(filepath.Join(root, a)); err == nil && strings.HasPrefix(a, "deploy/") {
					args[i] = filepath.Join(root, a)
				}
			}
			return args
		}
	}
	t.Fatalf("%s has no command %q", doc, prefix)
	return nil
}

// docBlock is the fenced block of doc (a path from the repository's root) that holds text.
func docBlock(t *testing.T, doc, text string) string {
	t.Helper()
	parts := strings.Split(readFile(t, repoPath(t, doc)), "```")
	for i := 1; i < len(parts); i += 2 { // the odd parts are inside fences
		if block := parts[i]; strings.Contains(block, text) {
			_, body, _ := strings.Cut(block, "\n") // the fence's info string
			return body
		}
	}
	t.Fatalf("%s has no block with %q", doc, text)
	return ""
}

// makeCommand is how the docs name what the build prints in a command: $(make -s version),
// $(make -s image-tag).
var makeCommand = regexp.MustCompile(`\$\(make -s ([a-z-]+)\)`)

// makePrints is what `make -s target` prints in the repository, as a user's shell runs it.
func makePrints(t *testing.T, target string) string {
	t.Helper()
	cmd := exec.Command("make", "-s", target)
	cmd.Dir = repoPath(t)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -s %s: %v", target, err)
	}
	return strings.TrimSpace(string(out))
}

// docNamespace runs doc's commands that make the namespace coredns-global, labelled Pod Security
// restricted, before the install.
func docNamespace(t *testing.T, cp *harness.ControlPlane, doc string) {
	t.Helper()
	for _, prefix := range []string{"kubectl create namespace coredns-global", "kubectl label namespace coredns-global "} {
		harness.RunKubectl(t, cp, "", docCommand(t, doc, prefix)...)
	}
	ns, err := cp.Client.CoreV1().Namespaces().Get(context.Background(), "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" || ns.Labels["linkerd.io/extension"] != "global" {
		t.Errorf("%s's namespace: labels %v", doc, ns.Labels)
	}
}

// kubeconfigOf is a kubeconfig with a token of ServiceAccount name in namespace ns.
func kubeconfigOf(t *testing.T, cp *harness.ControlPlane, ns, name string) string {
	t.Helper()
	tr, err := cp.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](3600)}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	kubeconfig, err := cp.KubeconfigFor(tr.Status.Token)
	testkit.Must(t, err)
	return kubeconfig
}

// startRelease starts n bin/coredns processes as an installed release's pods would run: its
// ConfigMap's Corefile, its Deployment's environment, its ServiceAccount's token.
func startRelease(t *testing.T, cp *harness.ControlPlane, ns, name string, n int, opts ...harness.CoreDNSOption) []*harness.CoreDNS {
	t.Helper()
	ctx := context.Background()
	d, err := cp.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	testkit.Must(t, err)
	env := podEnv(ns, kubeconfigOf(t, cp, ns, name), d.Spec.Template.Spec.Containers[0])
	corefile, err := mountedCorefile(cp, ns, d.Spec.Template.Spec)
	testkit.Must(t, err)
	tmpl := localize(corefile, repoPath(t))
	var out []*harness.CoreDNS
	for range n {
		out = append(out, harness.StartCoreDNS(t, nil, tmpl, append([]harness.CoreDNSOption{harness.WithEnv(env...)}, opts...)...))
	}
	return out
}

// corefileOf is the Corefile of the ConfigMap coredns-global of objs (a render, by kind/name).
func corefileOf(objs map[string]*unstructured.Unstructured) string {
	return objs["ConfigMap/coredns-global"].Object["data"].(map[string]any)["Corefile"].(string)
}

// mountedCorefile is the Corefile of the ConfigMap a pod of spec in namespace ns mounts (kustomize's
// is coredns-global-<hash>).
func mountedCorefile(cp *harness.ControlPlane, ns string, spec corev1.PodSpec) (string, error) {
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			cm, err := cp.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return cm.Data["Corefile"], nil
		}
	}
	return "", errors.New("the pod mounts no ConfigMap")
}

// podEnv is the environment of container ctr in a pod of namespace ns, reaching the API server
// with kubeconfig (a ServiceAccount's token) instead of the in-cluster configuration.
func podEnv(ns, kubeconfig string, ctr corev1.Container) []string {
	env := []string{"KUBECONFIG=" + kubeconfig, "KUBERNETES_SERVICE_HOST=", "POD_NAMESPACE=" + ns}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

// rulesOf are the rules of the ClusterRoles and Roles of a rendered stream, as JSON, by the role's
// kind/name and namespace ("" for a ClusterRole): objectsOf's keys would merge the Roles of one
// name in several namespaces.
func rulesOf(t *testing.T, stream string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, doc := range strings.Split(stream, "\n---\n") {
		o := &unstructured.Unstructured{}
		testkit.Must(t, yaml.Unmarshal([]byte(doc), &o.Object))
		if k := o.GetKind(); k != "ClusterRole" && k != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			b, err := json.Marshal(r)
			testkit.Must(t, err)
			key := o.GetKind() + "/" + o.GetName() + " " + o.GetNamespace()
			out[key] = append(out[key], string(b))
		}
	}
	return out
}

// TestChartRBAC: docs/rbac.md lists exactly the rules the chart can grant; the RBAC follows the
// options: ServiceImports only with serviceImports (or keepServiceImportRules), Roles in the
// watched namespaces and nothing of Services or EndpointSlices cluster-wide with namespaces, the
// forwarders' slices readable there with clientLocality, and the write ClusterRole kept as the
// owner, granting only its own get.
func TestChartRBAC(t *testing.T) {
	t.Parallel()
	helm := helms(t)["helm4"]
	var doc []any
	testkit.Must(t, yaml.Unmarshal([]byte(fencedBlocks(readFile(t, repoPath(t, "docs/rbac.md")), "yaml")[0]), &doc))
	documented := map[string]bool{}
	for _, r := range doc {
		b, err := json.Marshal(r)
		testkit.Must(t, err)
		documented[string(b)] = true
	}
	all, _ := helmTemplate(t, helm, "--set", "writer.serviceImports=true,clientLocality.sources={pod}")
	granted := map[string]bool{}
	for _, rules := range rulesOf(t, all) {
		for _, r := range rules {
			granted[r] = true
		}
	}
	if !reflect.DeepEqual(granted, documented) {
		t.Errorf("the chart grants\n%v\ndocs/rbac.md lists\n%v", slices.Sorted(maps.Keys(granted)), slices.Sorted(maps.Keys(documented)))
	}

	has := func(rules []string, resource string) bool {
		return slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, `"resources":["`+resource+`"]`) })
	}
	plain, _ := helmTemplate(t, helm)
	if r := rulesOf(t, plain); has(r["ClusterRole/coredns-global-write "], "serviceimports") || !has(r["ClusterRole/coredns-global-write "], "events") {
		t.Errorf("by default, the write rules %v", r["ClusterRole/coredns-global-write "])
	}
	keep, _ := helmTemplate(t, helm, "--set", "writer.keepServiceImportRules=true")
	if r := rulesOf(t, keep); !has(r["ClusterRole/coredns-global-write "], "serviceimports") {
		t.Errorf("keepServiceImportRules: the write rules %v", r["ClusterRole/coredns-global-write "])
	}

	text, namespaced := helmTemplate(t, helm, "--set", "namespaces={db,cache},writer.serviceImports=true,clientLocality.sources={node}")
	rules := rulesOf(t, text)
	for key, rs := range rules {
		for _, res := range []string{"services", "endpointslices", "events", "serviceimports"} {
			if strings.HasPrefix(key, "ClusterRole/") && has(rs, res) {
				t.Errorf("with namespaces, %s grants %s", key, res)
			}
		}
	}
	if w := rules["ClusterRole/coredns-global-write "]; len(w) != 1 || !strings.Contains(w[0], `"resourceNames":["coredns-global-write"]`) {
		t.Errorf("with namespaces, the owner ClusterRole's rules %v", w)
	}
	for _, ns := range []string{"db", "cache"} {
		r := rules["Role/coredns-global "+ns]
		if len(r) != 6 || !has(r, "serviceimports") || !has(r, "events") {
			t.Errorf("with namespaces, Role coredns-global in %s: %v", ns, r)
		}
		if !strings.Contains(text, "kind: RoleBinding\nmetadata:\n  name: coredns-global\n  namespace: "+ns+"\n") {
			t.Errorf("no RoleBinding in %s", ns)
		}
	}
	if r := rules["Role/coredns-global kube-system"]; len(r) != 1 || !has(r, "endpointslices") || !strings.Contains(r[0], `"verbs":["list","watch"]`) {
		t.Errorf("with namespaces, the forwarders' Role: %v", r)
	}
	c := corefileOf(namespaced)
	if !strings.Contains(c, "        namespaces db cache\n") {
		t.Errorf("the Corefile with namespaces:\n%s", c)
	}
}

// TestChartNetworkPolicy: networkPolicy admits DNS (the pods' UDP and TCP ports) from any source and
// the metrics port only from the pods the values select; it selects the release's pods, names only
// ports they have, and the API server takes it. (No network plugin runs here: what enforces it is
// the cluster's.)
func TestChartNetworkPolicy(t *testing.T) {
	t.Parallel()
	helm := helms(t)["helm4"]
	_, objs := helmTemplate(t, helm, "--set", "networkPolicy.enabled=true")
	if from := as[networkingv1.NetworkPolicy](t, objs["NetworkPolicy/coredns-global"]).Spec.Ingress[1].From; len(from) != 1 ||
		!maps.Equal(from[0].NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": "monitoring"}) {
		t.Errorf("by default, the metrics are admitted from %+v, want the namespace monitoring", from)
	}
	text, objs := helmTemplate(t, helm, "--set", "networkPolicy.enabled=true,networkPolicy.metrics.namespaceSelector.matchLabels.team=observability",
		"--set", "networkPolicy.metrics.podSelector.matchLabels.app=prometheus")
	testkit.Must(t, harness.EnsureNamespace(context.Background(), client(), "coredns-global"))
	harness.RunKubectl(t, cp, text, "apply", "-f", "-", "--server-side", "--dry-run=server", "--namespace", "coredns-global")
	np := as[networkingv1.NetworkPolicy](t, objs["NetworkPolicy/coredns-global"])
	tpl := as[appsv1.Deployment](t, objs["Deployment/coredns-global"]).Spec.Template
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || sel.Empty() || !sel.Matches(labels.Set(tpl.Labels)) {
		t.Errorf("the policy selects %v; the pods are labelled %v", np.Spec.PodSelector, tpl.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 2 {
		t.Fatalf("the policy: %+v", np.Spec)
	}
	ports := map[string]corev1.Protocol{}
	for _, p := range tpl.Spec.Containers[0].Ports {
		ports[p.Name] = p.Protocol
	}
	admitted := func(rule networkingv1.NetworkPolicyIngressRule) (out []string) {
		for _, p := range rule.Ports {
			if ports[p.Port.StrVal] != *p.Protocol {
				t.Errorf("the policy admits port %v/%s, which the pods do not have (%v)", p.Port, *p.Protocol, ports)
			}
			out = append(out, p.Port.StrVal+"/"+string(*p.Protocol))
		}
		return out
	}
	dns, metrics := np.Spec.Ingress[0], np.Spec.Ingress[1]
	if got := admitted(dns); len(dns.From) != 0 || !slices.Equal(got, []string{"dns/UDP", "dns-tcp/TCP"}) {
		t.Errorf("DNS is admitted from %v to %v, want anywhere to dns/UDP and dns-tcp/TCP", dns.From, got)
	}
	if got := admitted(metrics); len(metrics.From) != 1 || !slices.Equal(got, []string{"metrics/TCP"}) ||
		!maps.Equal(metrics.From[0].NamespaceSelector.MatchLabels, map[string]string{"team": "observability"}) ||
		!maps.Equal(metrics.From[0].PodSelector.MatchLabels, map[string]string{"app": "prometheus"}) {
		t.Errorf("the metrics are admitted from %+v to %v", metrics.From, got)
	}
}

// TestChartGrantsTheContract: in each shape of the chart's values, the roles it renders, bound to
// its ServiceAccount, grant every access the plugin needs (contract.Options.Needs) with the
// Corefile it renders, read as linkerd-global reads it (its Lease in the release's namespace unless
// the Corefile names one, as `linkerd global check` does). An option the chart sets whose access
// its rules leave out fails here, not first in a cluster.
func TestChartGrantsTheContract(t *testing.T) {
	t.Parallel()
	const ns, sa = "coredns-global", "coredns-global"
	helm := helms(t)["helm4"]
	for _, values := range []string{"", "writer.serviceImports=true,clientLocality.sources={pod}",
		"namespaces={db,cache},writer.serviceImports=true,clientLocality.sources={node}", "writer.enabled=false",
		"clientLocality.sources={ecs},clientLocality.ecsFrom={dns/ecs,10.0.0.0/8},clientLocality.forwarders={dns/cache}"} {
		var args []string
		if values != "" {
			args = []string{"--set", values}
		}
		stream, objs := helmTemplate(t, helm, args...)
		corefile := corefileOf(objs)
		o, err := stanza.Parse("Corefile", corefile)
		testkit.Must(t, err)
		o.LeaseNamespace = cmp.Or(o.LeaseNamespace, ns)
		allowed := boundRules(t, stream, ns, sa)
		for _, a := range append(o.Needs(), o.LinksRead()...) {
			if !allowed(a) {
				t.Errorf("values %q: the chart does not grant %s", values, a)
			}
		}
	}
}

// boundRules returns whether the roles of the rendered stream that are bound to ServiceAccount
// ns/sa allow an access: a ClusterRoleBinding's ClusterRole anywhere, a RoleBinding's Role or
// ClusterRole in the RoleBinding's namespace.
func boundRules(t *testing.T, stream, ns, sa string) func(contract.Access) bool {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{} // "Kind/namespace/name"
	var bindings []*unstructured.Unstructured
	for _, doc := range strings.Split(stream, "\n---\n") {
		u := &unstructured.Unstructured{}
		testkit.Must(t, yaml.Unmarshal([]byte(doc), &u.Object))
		switch u.GetKind() {
		case "ClusterRole":
			roles["ClusterRole//"+u.GetName()] = as[rbacv1.ClusterRole](t, u).Rules
		case "Role":
			roles["Role/"+u.GetNamespace()+"/"+u.GetName()] = as[rbacv1.Role](t, u).Rules
		case "ClusterRoleBinding", "RoleBinding":
			bindings = append(bindings, u)
		}
	}
	type grant struct {
		rules []rbacv1.PolicyRule
		ns    string // "": all namespaces
	}
	var grants []grant
	for _, u := range bindings {
		b := as[rbacv1.RoleBinding](t, u) // a ClusterRoleBinding's fields are a RoleBinding's
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == ns && s.Name == sa
		}) {
			continue
		}
		roleNS := ""
		if b.RoleRef.Kind == "Role" {
			roleNS = b.Namespace
		}
		grants = append(grants, grant{roles[b.RoleRef.Kind+"/"+roleNS+"/"+b.RoleRef.Name], b.Namespace})
	}
	return func(a contract.Access) bool {
		for _, g := range grants {
			if g.ns != "" && g.ns != a.Namespace {
				continue
			}
			for _, r := range g.rules {
				if a.GrantedBy(r.APIGroups, r.Resources, r.ResourceNames, r.Verbs) {
					return true
				}
			}
		}
		return false
	}
}
