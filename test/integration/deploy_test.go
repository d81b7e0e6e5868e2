package integration

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// kustomize runs `kubectl kustomize` on a deploy/ directory and returns the objects, by kind/name.
//
// The ConfigMap kustomize generates (named coredns-global-<hash of its content>) is keyed by its
// generator's name, ConfigMap/coredns-global; the object keeps its name.
func kustomize(t *testing.T, dir string) (string, map[string]*unstructured.Unstructured) {
	t.Helper()
	return kustomizeAt(t, repoPath(t, dir))
}

// kustomizeAt is kustomize of the kustomization in dir, an absolute path.
func kustomizeAt(t *testing.T, dir string) (string, map[string]*unstructured.Unstructured) {
	t.Helper()
	out := harness.RunKubectl(t, nil, "", "kustomize", dir)
	objs := objectsOf(t, out)
	generated := map[string]*unstructured.Unstructured{} // re-keyed after the walk: a map walked may yield what is added
	for k, o := range objs {
		if base, ok := generatedName(o); ok {
			if generated["ConfigMap/"+base] != nil {
				t.Fatalf("%s generates two ConfigMaps %s", dir, base)
			}
			delete(objs, k)
			generated["ConfigMap/"+base] = o
		}
	}
	maps.Copy(objs, generated)
	return out, objs
}

// generatedName is the generator's name of a ConfigMap kustomize generated: its name without the
// "-<hash>" of its content.
func generatedName(o *unstructured.Unstructured) (string, bool) {
	name := o.GetName()
	i := strings.LastIndexByte(name, '-')
	if o.GetKind() != "ConfigMap" || i < 0 || !kustomizeHash.MatchString(name[i+1:]) {
		return "", false
	}
	return name[:i], true
}

// kustomizeHash is the suffix kustomize gives a generated object: ten characters of an alphabet
// without vowels (sigs.k8s.io/kustomize/api/hasher).
var kustomizeHash = regexp.MustCompile(`^[2456789bcdfghkmt]{10}$`)

// objectsOf parses a stream of YAML documents into objects, by kind/name.
func objectsOf(t *testing.T, stream string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	for _, doc := range strings.Split(stream, "\n---\n") {
		u := &unstructured.Unstructured{}
		testkit.Must(t, yaml.Unmarshal([]byte(doc), &u.Object))
		if len(u.Object) == 0 { // Helm's empty documents, or only comments
			continue
		}
		objs[u.GetKind()+"/"+u.GetName()] = u
	}
	return objs
}

func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	if u == nil {
		t.Fatal("missing object")
	}
	var out T
	testkit.Must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out))
	return &out
}

// TestDeployRenders: both kustomizations render, the API server accepts every object (server-side
// dry run), and they say what docs/install.md says.
func TestDeployRenders(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"deploy/base", "deploy/overlays/ha"} {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			yamlText, objs := kustomize(t, dir)
			// Namespaced objects need their namespace to exist even for a dry run.
			testkit.Must(t, harness.EnsureNamespace(context.Background(), client(), "coredns-global"))
			harness.RunKubectl(t, cp, yamlText, "apply", "-f", "-", "--server-side", "--dry-run=server")

			d := as[appsv1.Deployment](t, objs["Deployment/coredns-global"])
			pod := d.Spec.Template.Spec
			c := pod.Containers[0]
			sc := c.SecurityContext
			if pod.SecurityContext == nil || !*pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
				!*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
				t.Errorf("security context: pod %+v container %+v", pod.SecurityContext, sc)
			}
			if c.LivenessProbe.HTTPGet.Path != "/health" || c.ReadinessProbe.HTTPGet.Path != "/ready" || c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("probes or resources: %+v %+v %+v", c.LivenessProbe, c.ReadinessProbe, c.Resources)
			}
			// No CLUSTER_NAME: the cluster's name comes from its ClusterProperty unless the Corefile says.
			if len(c.Env) != 1 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
				t.Errorf("env %+v", c.Env)
			}
			for _, p := range c.Ports {
				if p.ContainerPort < 1024 {
					t.Errorf("privileged port %+v", p)
				}
			}
			// DNS on the Service clients reach; the metrics on a headless one of their own.
			svc := as[corev1.Service](t, objs["Service/coredns-global"])
			if len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Port != 53 || svc.Spec.Ports[1].Protocol != corev1.ProtocolTCP {
				t.Errorf("service ports %+v", svc.Spec.Ports)
			}
			metrics := as[corev1.Service](t, objs["Service/coredns-global-metrics"])
			if len(metrics.Spec.Ports) != 1 || metrics.Spec.Ports[0].Port != 9153 || metrics.Spec.ClusterIP != corev1.ClusterIPNone ||
				!maps.Equal(metrics.Spec.Selector, svc.Spec.Selector) {
				t.Errorf("metrics service %+v", metrics.Spec)
			}

			if dir != "deploy/overlays/ha" {
				if *d.Spec.Replicas != 1 {
					t.Errorf("base replicas %d", *d.Spec.Replicas)
				}
				return
			}
			// One pod at a time without a spare node (TestHARollout rolls it out on three nodes).
			if ru := d.Spec.Strategy.RollingUpdate; *d.Spec.Replicas != 3 || ru.MaxUnavailable.IntValue() != 1 || ru.MaxSurge.IntValue() != 0 || pod.PriorityClassName != "coredns-global" {
				t.Errorf("ha deployment %+v %+v %q", *d.Spec.Replicas, d.Spec.Strategy, pod.PriorityClassName)
			}
			aa := pod.Affinity.PodAntiAffinity
			if aa.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" ||
				aa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "topology.kubernetes.io/zone" ||
				aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels["app.kubernetes.io/name"] != "coredns-global" {
				t.Errorf("anti-affinity %+v", aa)
			}
			pdb := as[policyv1.PodDisruptionBudget](t, objs["PodDisruptionBudget/coredns-global"])
			if pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("pdb %+v", pdb.Spec)
			}
			if objs["PriorityClass/coredns-global"] == nil {
				t.Error("no PriorityClass")
			}
		})
	}
}

// TestPodSecurityRestricted: every pod template shipped (deploy/base, deploy/overlays/ha, the chart
// with its defaults, values-ha.yaml and every pod option) is admitted, as a Pod created by server-side
// dry run, in a namespace enforcing Pod Security "restricted", as deploy/base's Namespace and
// docs/install.md's do; the same pod with one privilege more is not, so the namespace does enforce.
func TestPodSecurityRestricted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := client()
	const ns = "pss-restricted"
	_, base := kustomize(t, "deploy/base")
	if l := base["Namespace/coredns-global"].GetLabels(); l["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("deploy/base's Namespace: labels %v", l)
	}
	testkit.Must(t, harness.EnsureNamespace(ctx, c, ns))
	n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	testkit.Must(t, err)
	n.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	_, err = c.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{})
	testkit.Must(t, err)
	// What admission looks up: the ServiceAccount and the HA PriorityClass.
	_, err = c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns-global"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The overlay's own, so that a render applied beside this test (TestCLIRendersTheChart's dry
	// run) finds its PriorityClass as it would make it: a value may not change.
	_, ha := kustomize(t, "deploy/overlays/ha")
	haClass := as[schedulingv1.PriorityClass](t, ha["PriorityClass/coredns-global"])
	pc, err := c.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: haClass.Name}, Value: haClass.Value,
		GlobalDefault: haClass.GlobalDefault, Description: haClass.Description, PreemptionPolicy: haClass.PreemptionPolicy}, metav1.CreateOptions{})
	if err == nil {
		t.Cleanup(func() { _ = c.SchedulingV1().PriorityClasses().Delete(ctx, pc.Name, metav1.DeleteOptions{}) })
	} else if !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	helm := helms(t)["helm4"]
	_, chart := helmTemplate(t, helm)
	_, chartHA := helmTemplate(t, helm, "--values", chartPath(t, "values-ha.yaml"))
	_, chartAll := helmTemplate(t, helm, "--set", "clusterName=east,clientLocality.sources={ecs,node,pod},clientLocality.ecsFrom={dns/ecs},networkPolicy.enabled=true,podAntiAffinity=node",
		"--set", "image.digest=sha256:"+strings.Repeat("0", 64)+",priorityClass.create=true,podLabels.team=db,podAnnotations.note=x")
	templates := map[string]*unstructured.Unstructured{
		"deploy/base": base["Deployment/coredns-global"], "deploy/overlays/ha": ha["Deployment/coredns-global"],
		"the chart": chart["Deployment/coredns-global"], "values-ha.yaml": chartHA["Deployment/coredns-global"],
		"every pod option": chartAll["Deployment/coredns-global"],
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for name, u := range templates {
		tpl := as[appsv1.Deployment](t, u).Spec.Template
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "coredns-global-", Labels: tpl.Labels, Annotations: tpl.Annotations}, Spec: tpl.Spec}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, dryRun); err != nil {
			t.Errorf("%s: a pod of its template is refused under restricted: %v", name, err)
		}
		pod.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptrTo(true)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, dryRun); err == nil || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
			t.Errorf("%s: a pod with privilege escalation is admitted under restricted: %v", name, err)
		}
	}
}

// TestOptionChangeRollsThePods: an option changed as docs/install.md says, through kustomize, the
// CLI or Helm, changes the Deployment's pod template, so the pods roll onto it (no `reload` in the
// Corefile: a replica runs the Corefile it started with).
func TestOptionChangeRollsThePods(t *testing.T) {
	t.Parallel()
	template := func(objs map[string]*unstructured.Unstructured) string {
		b, err := json.Marshal(objs["Deployment/coredns-global"].Object["spec"].(map[string]any)["template"])
		testkit.Must(t, err)
		return string(b)
	}
	const line = "        cluster east\n"

	// Kustomize: an overlay replacing the generated ConfigMap's Corefile, as install.md shows.
	_, base := kustomize(t, "deploy/base")
	// Kustomize takes no absolute base: the overlay two levels below a copy of deploy/base.
	root := t.TempDir()
	entries, err := os.ReadDir(repoPath(t, "deploy/base"))
	testkit.Must(t, err)
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "deploy/base"), 0o755))
	for _, e := range entries {
		testkit.Must(t, os.WriteFile(filepath.Join(root, "deploy/base", e.Name()), []byte(readFile(t, repoPath(t, "deploy/base", e.Name()))), 0o644))
	}
	dir := filepath.Join(root, "clusters", "east")
	testkit.Must(t, os.MkdirAll(dir, 0o755))
	testkit.Must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(docBlock(t, "docs/install.md", "configMapGenerator:")), 0o644))
	edited := strings.Replace(readFile(t, repoPath(t, "deploy/base/Corefile")), "    global {\n", "    global {\n"+line, 1)
	testkit.Must(t, os.WriteFile(filepath.Join(dir, "Corefile"), []byte(edited), 0o644))
	_, changed := kustomizeAt(t, dir)
	cm := changed["ConfigMap/coredns-global"]
	if cm == nil || cm.GetName() == base["ConfigMap/coredns-global"].GetName() || !strings.Contains(corefileOf(changed), line) ||
		template(changed) == template(base) || !strings.Contains(template(changed), `"name":"`+cm.GetName()+`"`) {
		t.Errorf("kustomize: the overlay's ConfigMap %v; the pod template changed: %t", cm, template(changed) != template(base))
	}

	// The CLI and Helm: a value changed changes the Corefile's checksum in the pod template.
	render := map[string]func(set string) map[string]*unstructured.Unstructured{
		"linkerd global install": func(set string) map[string]*unstructured.Unstructured {
			out, stderr, code := cli(t, nil, "", "install", "--set", set)
			if code != 0 {
				t.Fatalf("linkerd global install --set %s: %s", set, stderr)
			}
			return objectsOf(t, out)
		},
		"helm": func(set string) map[string]*unstructured.Unstructured {
			_, objs := helmTemplate(t, helms(t)["helm4"], "--set", set)
			return objs
		},
	}
	for name, r := range render {
		before, after := r("clusterName=east"), r("clusterName=east,explain.from={10.0.0.0/8}")
		if corefileOf(before) == corefileOf(after) || template(before) == template(after) {
			t.Errorf("%s: explain.from changed the Corefile: %t, the pod template: %t", name, corefileOf(before) != corefileOf(after), template(before) != template(after))
		}
	}
}
