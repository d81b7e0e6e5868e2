package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// direct is the flag every command of TestCLICheck takes: the control plane has no kubelet to
// port-forward through.
const direct = "--direct-pods"

// TestCLICheck installs the extension with `linkerd global install | kubectl apply`, runs two
// replicas as its pods (bin/coredns with the installed Corefile, as the ServiceAccount), a stock
// bin/coredns as kube-dns, and checks: all pass, and status, explain and version say so; without
// the mirror policy, a warning; then each fault of the table fails its check, exit status 1; then
// every example and uninstall.
func TestCLICheck(t *testing.T) {
	t.Parallel()
	w := newCheckWorld(t)
	t.Run("healthy", w.healthy)
	t.Run("status", w.status)
	t.Run("explain", w.explain)
	t.Run("no mirror policy", w.noMirrorPolicy)
	for _, f := range w.faults() {
		t.Run(f.name, func(t *testing.T) {
			args, restore := f.fault(t)
			wantFailure(t, w.cp, f.check, f.says, append([]string{direct}, args...)...)
			if f.also != nil {
				f.also(t)
			}
			if restore != nil {
				restore()
			}
		})
	}
	t.Run("examples", w.examples)
	t.Run("prune", w.prune)
	t.Run("back", w.back)
	t.Run("uninstall", w.uninstall)
}

// checkWorld is TestCLICheck's cluster: the release installed by the CLI, its two replicas
// reaching the API server through proxy, db/foo local and mirrored from west.
type checkWorld struct {
	cp        *harness.ControlPlane
	dyn       dynamic.Interface
	ns        string
	manifests string
	proxy     *harness.Proxy
}

func newCheckWorld(t *testing.T) *checkWorld {
	cp := harness.Start(t) // of its own: the extension's cluster-scoped objects
	ctx := context.Background()
	testkit.Must(t, cp.InstallTopologyCRDs(ctx))
	dyn, err := dynamic.NewForConfig(cp.Config)
	testkit.Must(t, err)
	w := &checkWorld{cp: cp, dyn: dyn, ns: "coredns-global"}
	var stderr string
	var code int
	w.manifests, stderr, code = cli(t, nil, "", "install", "--set", "clusterName=east,replicas=2,priorityClass.create=true,image.repository=ghcr.io/globaldns/coredns-global",
		"--set", "linkerd.mirrorPolicy=true", "--set-json", `localities={"east":{"zone":"us-east-1a","region":"us-east-1"}}`)
	if code != 0 {
		t.Fatalf("install: %s", stderr)
	}
	// west's mirror, made before the mirror policy: here the admin plays Linkerd's service mirror.
	testkit.Must(t, harness.EnsureNamespace(ctx, cp.Client, "db"))
	_, err = harness.CreateMirror(ctx, cp.Client, mirror("db", "west", true, true))
	testkit.Must(t, err)
	harness.RunKubectl(t, cp, w.manifests, "apply", "-f", "-")

	w.proxy = harness.StartProxy(t, cp.APIServerAddr())
	replicas := startReplicasVia(t, cp, w.proxy, w.ns, "coredns-global", 2)
	for i, c := range replicas {
		createReplicaPod(t, cp, w.ns, fmt.Sprintf("coredns-global-%d", i), c)
	}
	setDeploymentAvailable(t, cp, w.ns, "coredns-global", 2)
	// The cluster DNS at the host's own address: an EndpointSlice may not hold a loopback one.
	host := hostAddr(t)
	kubeDNS(t, cp, host, stockCoreDNS(t, "global:{{.Port}} {\n    bind 127.0.0.1 "+host+"\n    forward . "+replicas[0].Addr+"\n}\n"))
	testkit.Must(t, harness.EnsureNamespace(ctx, cp.Client, "linkerd-multicluster"))
	testkit.Must(t, harness.ApplyLink(ctx, dyn, "linkerd-multicluster", "west", map[string]string{"topology.kubernetes.io/zone": "us-east-1b", "topology.kubernetes.io/region": "us-east-1"}))
	testkit.Must(t, harness.CreateNode(ctx, cp.Client, harness.Node{Name: "east-a", Zone: "us-east-1a", Region: "us-east-1"}))
	testkit.Must(t, harness.CreateStatefulSet(ctx, cp.Client, harness.StatefulSet{Namespace: "db", Service: "foo", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "foo-0", Node: "east-a", IP: "10.244.1.10", Ready: true}}}))
	waitLeader(t, replicas...)
	harness.Eventually(t, "the written slices", func() error { return writtenSlices(t, cp.Client, "db", map[string]int{"east": 1, "west": 2}) })
	return w
}

func (w *checkWorld) healthy(t *testing.T) {
	cp := w.cp
	harness.Eventually(t, "every check to pass", func() error {
		failed, code, _ := runCheck(t, cp, direct)
		if code != 0 || len(failed) > 0 {
			return fmt.Errorf("exit %d, failed %v", code, failed)
		}
		return nil
	})
	// As `linkerd check` runs an extension (cli/cmd/check.go: getExtensionCheckFlags), with a
	// flag of a later Linkerd this one does not know.
	_, code, res := runCheck(t, cp, direct, "--linkerd-namespace=linkerd", "--verbose=false", "--wait=5m0s", "--output=json", "--linkerd-cni-enabled", "--some-future-flag=1")
	if code != 0 || !res.Success {
		t.Errorf("with Linkerd's and unknown flags: exit %d, %+v", code, res)
	}
	table, _, code := cli(t, cp, "", "check", direct)
	// The Kubernetes version check runs (make builds the CLI with K8S_TESTED) and passes here.
	for _, want := range []string{"linkerd-global\n--------------\n√ can initialize the client\n", "√ every replica reports synced\n",
		"√ the Kubernetes version is one this release was tested on\n",
		"√ the cluster DNS forwards the zones to the plugin\n", "\nStatus check results are √\n"} {
		if code != 0 || !strings.Contains(table, want) {
			t.Errorf("check (exit %d) has no %q:\n%s", code, want, table)
		}
	}
	if failed, code, _ := runCheck(t, cp, "--pre"); code != 0 || len(failed) > 0 {
		t.Errorf("check --pre: exit %d, %v", code, failed)
	}
	// Each replica's version, as it says it, beside the CLI's: the same build.
	v := thisBuild(t).version
	out, _, code := cli(t, cp, "", "version", direct)
	if want := "Client version: " + v + "\nServer version: " + v + " (coredns-global-0, coredns-global-1)\n"; code != 0 || out != want {
		t.Errorf("version: exit %d\n%s\nwant\n%s", code, out, want)
	}
}

func (w *checkWorld) status(t *testing.T) {
	out, stderr, code := cli(t, w.cp, "", "status", direct, "-o", "json")
	var rows []struct {
		Cluster, Locality, Source string
		Tier                      *int
		Alive                     *bool `json:"gatewayAlive"`
		Services                  *int  `json:"globalServices"`
		Ready                     int   `json:"readyRecords"`
	}
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil {
		t.Fatalf("status -o json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	got := fmt.Sprint(rows)
	if len(rows) != 2 || rows[0].Cluster != "east" || rows[0].Alive != nil || *rows[0].Tier != 0 || *rows[0].Services != 1 || rows[0].Ready != 1 ||
		rows[1].Cluster != "west" || rows[1].Locality != "region:us-east-1,zone:us-east-1b" || rows[1].Source != "link" || !*rows[1].Alive || *rows[1].Tier != 2 ||
		*rows[1].Services != 1 || rows[1].Ready != 2 {
		t.Errorf("status: %s\n%s", got, out)
	}
	table, _, _ := cli(t, w.cp, "", "status", direct)
	if !strings.HasPrefix(table, "CLUSTER  LOCALITY") || !strings.Contains(table, "\nwest     region:us-east-1,zone:us-east-1b  link  ") {
		t.Errorf("status:\n%s", table)
	}
}

func (w *checkWorld) explain(t *testing.T) {
	out, stderr, code := cli(t, w.cp, "", "explain", "foo.db.global", direct)
	for _, want := range []string{"foo.db.global. (NOERROR)\n", "service", "db/foo", "ADDR", "10.244.1.10", "west", "ready"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("explain (exit %d) has no %q:\n%s%s", code, want, out, stderr)
		}
	}
	out, _, code = cli(t, w.cp, "", "explain", "nope.db.global", direct, "-o", "json")
	var res struct {
		Rcode string
		Lines []map[string]string
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Rcode != "NXDOMAIN" || len(res.Lines) != 1 || !strings.HasPrefix(res.Lines[0]["exists"], "false") {
		t.Errorf("explain -o json: exit %d, %v, %+v", code, err, res)
	}
}

// checkFault is a fault and the check it fails, with an error that says says: fault makes it and
// returns check's further arguments and what undoes it (nil: nothing); also checks more.
type checkFault struct {
	name, check, says string
	fault             func(t *testing.T) (args []string, restore func())
	also              func(t *testing.T)
}

// faults are the table of TestCLICheck, played in order, each undone before the next.
func (w *checkWorld) faults() []checkFault {
	ctx, cp := context.Background(), w.cp
	const forwards, rbac = "the cluster DNS forwards the zones to the plugin", "RBAC grants what the Corefile's options need"
	dnsAt := func(corefile string) func(t *testing.T) ([]string, func()) {
		return func(t *testing.T) ([]string, func()) {
			return []string{"--cluster-dns-addr", stockCoreDNS(t, corefile).Addr}, nil
		}
	}
	drop := func(resource, verb string) func(t *testing.T) ([]string, func()) {
		return func(t *testing.T) ([]string, func()) {
			return nil, dropVerb(t, cp, "coredns-global-read", resource, verb)
		}
	}
	nodeLocal := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "node-local-dns", Namespace: "kube-system"},
		Data: map[string]string{"Corefile": ".:53 {\n    bind 169.254.20.10\n    forward . __PILLAR__UPSTREAM__SERVERS__\n}\n"}}
	return []checkFault{
		{"zone answered by the public DNS", forwards, "a0.nic.global.", dnsAt(`.:{{.Port}} {
    template IN SOA global {
        answer "global. 3600 IN SOA a0.nic.global. hostmaster.donuts.email. 1 7200 900 1209600 3600"
    }
}
`), nil},
		{"zone not forwarded", forwards, "no SOA", dnsAt(".:{{.Port}} {\n    whoami\n}\n"), nil},
		{"NodeLocal DNSCache without the stub", "NodeLocal DNSCache forwards the zones", "no server block", func(t *testing.T) ([]string, func()) {
			_, err := cp.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, nodeLocal, metav1.CreateOptions{})
			testkit.Must(t, err)
			return nil, nil
		}, func(t *testing.T) {
			nodeLocal.Data["Corefile"] += "global:53 {\n    bind 169.254.20.10\n    forward . 10.96.0.53\n}\n"
			_, err := cp.Client.CoreV1().ConfigMaps("kube-system").Update(ctx, nodeLocal, metav1.UpdateOptions{})
			testkit.Must(t, err)
			if failed, code, _ := runCheck(t, cp, direct); code != 0 {
				t.Errorf("with the stub: exit %d, %v", code, failed)
			}
		}},
		{"Link without locality", "every Linkerd Link's cluster has a name and a locality", "cluster north has no locality", func(t *testing.T) ([]string, func()) {
			testkit.Must(t, harness.ApplyLink(ctx, w.dyn, "linkerd-multicluster", "north", nil))
			return nil, func() {
				testkit.Must(t, w.dyn.Resource(harness.LinkResource).Namespace("linkerd-multicluster").Delete(ctx, "north", metav1.DeleteOptions{}))
			}
		}, nil},
		{"RBAC missing a verb", rbac, "watch endpointslices.discovery.k8s.io (all namespaces)", drop("endpointslices", "watch"), nil},
		{"Links unreadable", "RBAC grants reading Linkerd's Links", "list links.multicluster.linkerd.io in linkerd-multicluster", drop("links", "list"), nil},
		// The contract's access of client_locality pod: the chart grants the Pods read with it;
		// with the Corefile's option set and the rule dropped, check names what is missing.
		{"Pods unreadable under client_locality pod", rbac, "list pods (all namespaces)", w.clientLocalityPodWithoutPods, nil},
		{"no replica synced", "every replica reports synced", "coredns-global-unsynced has not synced", func(t *testing.T) ([]string, func()) {
			cut := harness.StartProxy(t, cp.APIServerAddr())
			cut.Cut()
			kubeconfig, err := cp.KubeconfigVia(cut, "")
			testkit.Must(t, err)
			unsynced := harness.StartCoreDNS(t, nil, "global:{{.Port}} {\n    global {\n        kubeconfig "+kubeconfig+"\n        endpointslices off\n        startup_timeout 1s\n    }\n}\n")
			createReplicaPod(t, cp, w.ns, "coredns-global-unsynced", unsynced)
			return nil, func() {
				testkit.Must(t, cp.Client.CoreV1().Pods(w.ns).Delete(ctx, "coredns-global-unsynced", metav1.DeleteOptions{}))
			}
		}, nil},
		// The replicas keep answering from what they have; the leader cannot renew.
		{"no leader", "a leader holds the writer Lease and renews it", "renewed it", func(t *testing.T) ([]string, func()) {
			w.proxy.Cut()
			return nil, w.proxy.Restore
		}, func(t *testing.T) {
			if failed, _, _ := runCheck(t, cp, direct); len(failed) != 1 {
				t.Errorf("the replicas cut off from the API server fail %v, want the leader's check alone", failed)
			}
		}},
	}
}

// clientLocalityPodWithoutPods sets client_locality pod in the installed Corefile and grants the
// Pods read, waits for the RBAC check to pass with it, then drops its list verb.
func (w *checkWorld) clientLocalityPodWithoutPods(t *testing.T) ([]string, func()) {
	const desc = "RBAC grants what the Corefile's options need"
	ctx := context.Background()
	cms, roles := w.cp.Client.CoreV1().ConfigMaps(w.ns), w.cp.Client.RbacV1().ClusterRoles()
	cm, err := cms.Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	corefile := cm.Data["Corefile"]
	cm.Data["Corefile"] = strings.Replace(corefile, "    global {\n", "    global {\n        client_locality pod\n", 1)
	if cm.Data["Corefile"] == corefile {
		t.Fatalf("no global block in the installed Corefile:\n%s", corefile)
	}
	cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	testkit.Must(t, err)
	read, err := roles.Get(ctx, "coredns-global-read", metav1.GetOptions{})
	testkit.Must(t, err)
	rules := read.Rules
	read.Rules = append(slices.Clone(rules), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}})
	_, err = roles.Update(ctx, read, metav1.UpdateOptions{})
	testkit.Must(t, err)
	harness.Eventually(t, "the RBAC check to pass with the Pods read", func() error {
		if failed, _, _ := runCheck(t, w.cp, direct); failed[desc] != "" {
			return fmt.Errorf("%s: %s", desc, failed[desc])
		}
		return nil
	})
	restoreVerb := dropVerb(t, w.cp, "coredns-global-read", "pods", "list")
	return nil, func() {
		restoreVerb()
		cm.Data["Corefile"] = corefile
		_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		testkit.Must(t, err)
		read, err := roles.Get(ctx, "coredns-global-read", metav1.GetOptions{})
		testkit.Must(t, err)
		read.Rules = rules
		_, err = roles.Update(ctx, read, metav1.UpdateOptions{})
		testkit.Must(t, err)
	}
}

func (w *checkWorld) noMirrorPolicy(t *testing.T) {
	const desc = "an admission policy guards Linkerd's mirror labels"
	testkit.Must(t, w.cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), "linkerd-mirrors", metav1.DeleteOptions{}))
	failed, code, _ := runCheck(t, w.cp, direct)
	if code != 0 || !strings.HasPrefix(failed[desc], "warning: ") || !strings.Contains(failed[desc], "linkerd.mirrorPolicy") {
		t.Errorf("without the mirror policy: exit %d, failed %v", code, failed)
	}
	harness.RunKubectl(t, w.cp, w.manifests, "apply", "-f", "-")
	if failed, code, _ := runCheck(t, w.cp, direct); code != 0 || failed[desc] != "" {
		t.Errorf("with the mirror policy again: exit %d, failed %v", code, failed)
	}
}

// examples runs every example of every command, as printed; prune's and uninstall's in theirs.
func (w *checkWorld) examples(t *testing.T) {
	examples := cliExamples(t)
	for _, cmd := range slices.Sorted(maps.Keys(examples)) {
		if cmd == "prune" || cmd == "uninstall" {
			continue
		}
		for _, ex := range examples[cmd] {
			out, ok := runExample(t, w.cp, ex)
			if !ok {
				t.Errorf("%s:\n%s", ex, out)
			}
		}
	}
}

// prune upgrades as docs/install.md's CLI upgrade does, dropping --ha and namespaces: prune's
// example (install, then prune, with the new flags) deletes the PriorityClass, the
// PodDisruptionBudget and the Roles in the namespaces dropped, and nothing else: what the new render
// has stays, and a Helm release's objects beside it are not listed.
func (w *checkWorld) prune(t *testing.T) {
	ctx, cp := context.Background(), w.cp
	testkit.Must(t, harness.EnsureNamespace(ctx, cp.Client, "tenant"))
	wide, stderr, code := cli(t, nil, "", "install", "--ha", "--set", "clusterName=east,namespaces={db,tenant}")
	if code != 0 {
		t.Fatalf("install --ha: %s", stderr)
	}
	harness.RunKubectl(t, cp, wide, "apply", "-f", "-")
	_, err := cp.Client.PolicyV1().PodDisruptionBudgets(w.ns).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "helm-coredns-global",
		Labels: map[string]string{"app.kubernetes.io/part-of": "coredns-global", "app.kubernetes.io/managed-by": "Helm"}}}, metav1.CreateOptions{})
	testkit.Must(t, err)

	examples := cliExamples(t)["prune"]
	if len(examples) != 3 || !strings.HasPrefix(examples[0], "linkerd global install ") || !strings.HasPrefix(examples[1], "linkerd global prune ") {
		t.Fatalf("prune's examples: %q", examples)
	}
	examples = examples[:2] // the third, --manifest, is back's
	narrow, stderr, code := cli(t, nil, "", strings.Fields(strings.TrimPrefix(strings.Split(examples[0], " | ")[0], "linkerd global "))...)
	if code != 0 {
		t.Fatalf("%s: %s", examples[0], stderr)
	}
	kept, pruned := placedObjects(t, narrow), map[string]*unstructured.Unstructured{}
	for key, u := range placedObjects(t, wide) {
		if kept[key] == nil {
			pruned[key] = u
		}
	}
	for _, kind := range []string{"PriorityClass", "PodDisruptionBudget", "Role"} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(pruned)), func(key string) bool { return strings.HasPrefix(key, kind+"/") }) {
			t.Fatalf("dropping --ha and namespaces drops no %s: %v", kind, slices.Collect(maps.Keys(pruned)))
		}
	}
	install := readFile(t, repoPath(t, "docs", "install.md"))
	for _, ex := range examples {
		if !strings.Contains(install, "\n"+ex+"\n") {
			t.Errorf("docs/install.md has no line %q", ex)
		}
		if out, ok := runExample(t, cp, ex); !ok {
			t.Fatalf("%s:\n%s", ex, out)
		}
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.Client.Discovery()))
	for key, u := range kept {
		if !w.exists(t, mapper, u) {
			t.Errorf("after prune, %s is gone", key)
		}
	}
	for key, u := range pruned {
		if w.exists(t, mapper, u) {
			t.Errorf("after prune, %s is still there", key)
		}
	}
	if _, err := cp.Client.PolicyV1().PodDisruptionBudgets(w.ns).Get(ctx, "helm-coredns-global", metav1.GetOptions{}); err != nil {
		t.Errorf("prune deleted a Helm release's PodDisruptionBudget: %v", err)
	}
	w.manifests = narrow
}

// back goes back to the previous release with its CLI as docs/install.md says: its install output
// applied, then this CLI's prune --manifest of that output (prune's third example): what this
// build installed and the previous one does not render is deleted, what it renders is there.
func (w *checkWorld) back(t *testing.T) {
	prev := previousRelease(t)
	dir := t.TempDir()
	// The previous release's CLI, as its release names it.
	testkit.Must(t, os.Symlink(filepath.Join(filepath.Dir(prev.binary), "linkerd-global"), filepath.Join(dir, "linkerd-global-"+prev.version+"-linux-amd64")))
	block := docBlock(t, "docs/install.md", "prune --manifest previous.yaml")
	if ex := cliExamples(t)["prune"][2]; !strings.Contains(block, ex+"\n") {
		t.Errorf("docs/install.md's way back has no %q", ex)
	}
	if out, ok := runExample(t, w.cp, `export PATH="`+dir+`:$PATH"; cd "`+dir+`"`+"\n"+block); !ok {
		t.Fatalf("docs/install.md's way back:\n%s\n%s", block, out)
	}
	previous := readFile(t, filepath.Join(dir, "previous.yaml"))
	kept := placedObjects(t, previous)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(w.cp.Client.Discovery()))
	for key, u := range placedObjects(t, w.manifests) {
		if kept[key] == nil && w.exists(t, mapper, u) {
			t.Errorf("back at %s, %s is still there", prev.version, key)
		} else if kept[key] == nil {
			t.Logf("back at %s, %s deleted", prev.version, key)
		}
	}
	for key, u := range kept {
		if !w.exists(t, mapper, u) {
			t.Errorf("back at %s, %s is missing", prev.version, key)
		}
	}
	if _, stderr, code := cli(t, w.cp, previous, "prune", "--manifest", "-", "--ha"); code == 0 || !strings.Contains(stderr, "--manifest gives the objects to keep") {
		t.Errorf("prune --manifest with --ha: exit %d, %s", code, stderr)
	}
	w.manifests = previous
}

// placedObjects are the objects of a stream by kind, namespace and name.
func placedObjects(t *testing.T, stream string) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, u := range objectsOf(t, stream) {
		out[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = u
	}
	return out
}

// exists says whether the object u names is in the cluster (and not being deleted).
func (w *checkWorld) exists(t *testing.T, mapper meta.RESTMapper, u *unstructured.Unstructured) bool {
	t.Helper()
	m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
	testkit.Must(t, err)
	got, err := w.dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(context.Background(), u.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	testkit.Must(t, err)
	return got.GetDeletionTimestamp() == nil
}

func (w *checkWorld) uninstall(t *testing.T) {
	ctx, cp := context.Background(), w.cp
	// A Helm release's ClusterRole in the same cluster: not this CLI's to list.
	_, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "helm-coredns-global-read",
		Labels: map[string]string{"app.kubernetes.io/part-of": "coredns-global", "app.kubernetes.io/managed-by": "Helm"}}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	// A Helm release's namespace, labelled for linkerd check as install.md says, with the
	// release's record: not this CLI's either.
	_, err = cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "helm-global",
		Labels: map[string]string{"linkerd.io/extension": "global"}}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	_, err = cp.Client.CoreV1().Secrets("helm-global").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.coredns-global.v1",
		Labels: map[string]string{"owner": "helm", "name": "coredns-global"}}, Type: "helm.sh/release.v1"}, metav1.CreateOptions{})
	testkit.Must(t, err)
	examples := cliExamples(t)["uninstall"]
	if len(examples) != 1 || !strings.HasPrefix(examples[0], "linkerd global uninstall | ") {
		t.Fatalf("uninstall's examples: %q", examples)
	}
	out, stderr, code := cli(t, cp, "", "uninstall")
	if code != 0 {
		t.Fatalf("uninstall: %s", stderr)
	}
	var want, got []string
	for k, u := range objectsOf(t, w.manifests) {
		if u.GetNamespace() == "" {
			want = append(want, k)
		}
	}
	for k := range objectsOf(t, out) {
		got = append(got, k)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) || len(want) < 5 {
		t.Errorf("uninstall lists %v; install created %v cluster-scoped", got, want)
	}
	if out, ok := runExample(t, cp, examples[0]); !ok {
		t.Fatalf("%s:\n%s", examples[0], out)
	}
	if _, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, "coredns-global-write", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after uninstall, ClusterRole coredns-global-write: %v", err)
	}
	if _, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, "helm-coredns-global-read", metav1.GetOptions{}); err != nil {
		t.Errorf("uninstall deleted another's ClusterRole: %v", err)
	}
	if ns, err := cp.Client.CoreV1().Namespaces().Get(ctx, "helm-global", metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("uninstall deleted a Helm release's namespace: %v", err)
	}
}
