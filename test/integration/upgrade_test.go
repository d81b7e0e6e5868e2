package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// release is a build of the plugin: its version, the image that holds it, its coredns and its chart.
type release struct {
	version, image, binary, chart string
}

// previousRelease is the release before this build (make previous: its coredns and its source).
func previousRelease(t *testing.T) release {
	t.Helper()
	dir, version := os.Getenv("GLOBAL_PREVIOUS_DIR"), os.Getenv("GLOBAL_PREVIOUS_VERSION")
	bin := filepath.Join(dir, "coredns")
	if st, err := os.Stat(bin); dir == "" || version == "" || err != nil || st.IsDir() {
		t.Fatalf("GLOBAL_PREVIOUS_DIR (%q) and GLOBAL_PREVIOUS_VERSION (%q) name the previous release's build: run `make previous` (make test does)", dir, version)
	}
	return release{version: version, image: imageRepository + ":" + version, binary: bin, chart: filepath.Join(dir, "src", "deploy", "chart")}
}

// thisBuild is this commit's release: the image `make image` named, bin/coredns, deploy/chart.
func thisBuild(t *testing.T) release {
	t.Helper()
	tarball, err := harness.Built(harness.EnvImageTar, "image")
	testkit.Must(t, err)
	bin, err := harness.CoreDNSBinary()
	testkit.Must(t, err)
	image := imageName(t, tarball)
	// The tag is the version with its build metadata joined by _ (a tag has no +, a version no _).
	_, tag, _ := strings.Cut(image, imageRepository+":")
	return release{version: strings.ReplaceAll(tag, "_", "+"), image: image, binary: bin, chart: chartPath(t, "")}
}

// TestUpgradeRollback upgrades and rolls back as an operator does, with Helm, on a control plane
// with kube-controller-manager's deployment and replicaset controllers, kube-scheduler and three
// Nodes, where every pod runs for real (the kubelet above): the previous release installed with its
// own chart and values-ha.yaml, then docs/install.md's upgrade command to this build, then its
// rollback command; mid-upgrade, a pod of the previous release crashes and starts again on the
// upgraded ConfigMap (crashMidRollout). After each, every pod runs the intended image and binary and says that version;
// throughout, a client sends ~1000 queries a second over UDP and TCP to the ready pods and not one
// fails; the writer's lease moves between versions and the written objects are never written
// again (not one resourceVersion changes: the old and the new writer write the same bytes, so no
// handover deletes, empties or fights over them), but for the label this build adds to 0.1.0's
// slices, once each. Then one replica of each version side by side,
// each leading in turn, keep them as they are.
func TestUpgradeRollback(t *testing.T) {
	t.Parallel()
	own := harness.StartWith(t, harness.Options{Controllers: []string{"deployment", "replicaset"}, Scheduler: true})
	ctx := context.Background()
	c := own.Client
	helm := helms(t)["helm4"]
	const ns, name, doc = "coredns-global", "coredns-global", "docs/install.md"
	prev, cur := previousRelease(t), thisBuild(t)
	if prev.image == cur.image {
		t.Fatalf("the previous release and this build are both %s", cur.image)
	}

	// The mesh: this cluster's foo (two ready pods, one not) and west's mirror of it.
	testkit.Must(t, harness.EnsureNamespace(ctx, c, "db"))
	localFooIn(t, c, "db")
	west, err := harness.CreateMirror(ctx, c, mirror("db", "west", true, true))
	testkit.Must(t, err)
	want := []string{"10.244.1.10", "10.244.2.11", west.ClusterIPs["foo-0"], west.ClusterIPs["foo-1"]}
	for i := range 3 {
		testkit.Must(t, createSchedulableNode(ctx, c, fmt.Sprintf("node-%d", i), []string{"us-east-1a", "us-east-1b"}[i%2]))
	}
	testkit.Must(t, harness.EnsureNamespace(ctx, c, ns))
	images := map[string]string{prev.image: prev.binary, cur.image: cur.binary}
	k := harness.NewKubelet(t, own, ns, runPod(t, own, ns, images))

	// Install the previous release, as it was installed: its chart, its HA values, its image.
	harness.RunHelm(t, helm, own, "install", name, prev.chart, "--namespace", ns, "--values", filepath.Join(prev.chart, "values-ha.yaml"),
		"--set", "image.repository="+imageRepository, "--set", "image.tag="+prev.version, "--set", "clusterName=east")
	k.Until("the previous release rolled out", rolledOutTo(t, k, own, prev, 3))
	harness.Eventually(t, "the written slices", func() error { return writtenSlices(t, c, "db", map[string]int{"east": 3, "west": 2}) })
	k.Until("a leader", func() error { _, err := leaderOf(t, k.Running()); return err })
	written := writtenVersions(t, own)
	// 0.1.0 wrote its slices without service.kubernetes.io/headless, which this build's writer adds.
	relabels := !allHeadless(t, own)

	var running []*harness.CoreDNS
	for _, pp := range k.Running() {
		running = append(running, pp.C)
	}
	load := newPool("foo.db.global.", want, running...)
	k.Started, k.Exited = load.add, load.remove
	defer load.stop()
	load.await(t, 300)
	load.check(t, "the previous release")

	helmRun := func(args []string) func() { return func() { harness.RunHelm(t, helm, own, args...) } }
	undo := docCommand(t, doc, "kubectl -n coredns-global rollout undo ")
	phases := []struct {
		name string
		to   release
		run  func()
	}{
		{"upgrade", cur, helmRun(docCommand(t, doc, "helm upgrade coredns-global deploy/chart --namespace coredns-global --reset-then-reuse-values --set image.tag="))},
		// The Deployment alone goes back: the previous release's pods start on this build's
		// ConfigMap (TestDefaultsRunSideBySide: its default Corefile is one they read).
		{"rollout undo", prev, func() { harness.RunKubectl(t, own, "", undo...) }},
		{"rollout undo again", cur, func() { harness.RunKubectl(t, own, "", undo...) }},
		// After kubectl's undo, Helm 4's apply meets kubectl's image: install.md's rollback then.
		{"rollback", prev, helmRun(docCommand(t, doc, "helm rollback coredns-global --namespace coredns-global --force-conflicts"))},
	}
	for _, ph := range phases {
		ph.run()
		if ph.name == "upgrade" {
			crashMidRollout(t, k, own, prev, load)
		}
		k.Until(ph.name+": every pod on "+ph.to.image, rolledOutTo(t, k, own, ph.to, 3))
		var leader *harness.PodProcess
		k.Until(ph.name+": a leader of "+ph.to.version, func() error {
			var err error
			leader, err = leaderOf(t, k.Running())
			return err
		})
		if images[leader.Image] != ph.to.binary {
			t.Errorf("%s: the lease is held by %s, of %s", ph.name, leader.Pod, leader.Image)
		}
		// install.md's commands after an upgrade: the rollout's status, and the versions (the CLI
		// reaches one replica with --dns-addr: the pods' addresses are not the processes').
		harness.RunKubectl(t, own, "", docCommand(t, doc, "kubectl -n coredns-global rollout status ")...)
		out, _, _ := cli(t, own, "", "version", "--dns-addr", leader.C.Addr)
		if !strings.Contains(out, "\nServer version: "+ph.to.version+" ("+leader.C.Addr+")\n") {
			t.Errorf("%s: linkerd global version:\n%s", ph.name, out)
		}
		load.await(t, 300)
		load.check(t, ph.name)
		if ph.to == cur && relabels && ph.name == "upgrade" {
			// This build's writer adds the label (its admission policy requires it): one update
			// per slice, nothing else.
			harness.Eventually(t, "the slices labelled headless", func() error {
				if !allHeadless(t, own) {
					return fmt.Errorf("a written slice without %s", corev1.IsHeadlessService)
				}
				return nil
			})
			got := writtenVersions(t, own)
			for k, v := range written {
				if _, ok := got[k]; !ok || strings.HasPrefix(k, "Service/") && got[k] != v {
					t.Errorf("%s: %s was deleted or written again (%s, was %s)", ph.name, k, got[k], v)
				}
			}
			if len(got) != len(written) {
				t.Errorf("%s: the written objects are %v, were %v", ph.name, got, written)
			}
			written = got
		}
		if got := writtenVersions(t, own); !maps.Equal(got, written) {
			t.Errorf("%s: the written objects were written again: %v, were %v", ph.name, got, written)
		}
	}

	// Side by side: with the Deployment scaled to nothing, a replica of each release with the
	// release's Corefile, the lease handed from one to the other and back (the leader steps down as
	// a replica going away does, and a replica of its release takes its place).
	harness.RunKubectl(t, own, "", "scale", "deployment", name, "--namespace", ns, "--replicas", "0")
	k.Until("the Deployment scaled to nothing", func() error {
		if n := len(k.Processes()); n > 0 {
			return fmt.Errorf("%d pods running", n)
		}
		return nil
	})
	of := map[*harness.CoreDNS]release{}
	start := func(r release) *harness.CoreDNS {
		c := startRelease(t, own, ns, name, 1, harness.WithBinary(r.binary))[0]
		of[c] = r
		return c
	}
	pair := []*harness.CoreDNS{start(prev), start(cur)}
	leader := waitLeader(t, pair...)
	for round := range 3 {
		// The same records (each replica rotates them within a tier, by chance).
		a, b := harness.Render(ask(t, pair[0], "tcp", "foo.db.global.", dns.TypeA).Answer), harness.Render(ask(t, pair[1], "tcp", "foo.db.global.", dns.TypeA).Answer)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) || len(a) != len(want) {
			t.Errorf("side by side, round %d: %s answers %v, %s %v", round, of[pair[0]].version, a, of[pair[1]].version, b)
		}
		if got := writtenVersions(t, own); !maps.Equal(got, written) {
			t.Errorf("side by side, round %d, %s leading: the written objects were written again: %v, were %v", round, of[leader].version, got, written)
		}
		if round == 2 {
			break
		}
		stepping := leader
		pair = slices.DeleteFunc(pair, func(c *harness.CoreDNS) bool { return c == stepping })
		stepping.Stop()
		leader = waitLeader(t, pair...)
		if of[leader] == of[stepping] {
			t.Fatalf("side by side: the lease went from %s to a replica of the same release", of[stepping].version)
		}
		pair = append(pair, start(of[stepping]))
	}
}

// crashMidRollout, once pods of both releases run, pauses the rollout (kubectl rollout pause) and
// crashes a pod of the old release: its kubelet starts it again, with the ConfigMap the upgrade left,
// and it must run and say the old release's version, not crash-loop on a Corefile it cannot read
// (issue: the previous release's pods restarted mid-rollout went down). Then the rollout resumes.
// The crashed replica leaves the load pool first: a crash loses the queries in flight to it.
func crashMidRollout(t *testing.T, k *harness.Kubelet, cp *harness.ControlPlane, old release, load *pool) {
	t.Helper()
	deploy := []string{"--namespace", "coredns-global", "deployment/coredns-global"}
	k.Until("mid-rollout: pods of both releases", func() error {
		olds := 0
		for _, pp := range k.Running() {
			if pp.Image == old.image {
				olds++
			}
		}
		if olds == 0 || olds == len(k.Running()) {
			return fmt.Errorf("%d of %d running pods of %s", olds, len(k.Running()), old.version)
		}
		return nil
	})
	harness.RunKubectl(t, cp, "", append([]string{"rollout", "pause"}, deploy...)...)
	var crashed *harness.PodProcess
	k.Until("mid-rollout, paused: a pod of "+old.version+" running", func() error {
		for _, pp := range k.Running() {
			if pp.Image == old.image {
				crashed = pp
				return nil
			}
		}
		return fmt.Errorf("no pod of %s running", old.version)
	})
	load.remove(crashed.C)
	crashed.C.Kill()
	k.Until("mid-rollout: "+crashed.Pod+" started again", func() error {
		if crashed.Restarts == 0 {
			return fmt.Errorf("%s not restarted", crashed.Pod)
		}
		return nil
	})
	if v := replicaVersion(t, crashed.C); v != "1.15.0+"+old.version {
		t.Errorf("mid-rollout: %s restarted says version %q, want 1.15.0+%s", crashed.Pod, v, old.version)
	}
	harness.RunKubectl(t, cp, "", append([]string{"rollout", "resume"}, deploy...)...)
}

// rolledOutTo reports nil once the Deployment of cp's namespace of k runs n pods, all of r's
// image, each process saying r's version, and none terminating.
func rolledOutTo(t *testing.T, k *harness.Kubelet, cp *harness.ControlPlane, r release, n int) func() error {
	return func() error {
		ctx := context.Background()
		const ns = "coredns-global"
		d, err := cp.Client.AppsV1().Deployments(ns).Get(ctx, "coredns-global", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := deploymentDone(d, n); err != nil {
			return err
		}
		pods, err := cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		procs := k.Processes()
		if len(pods.Items) != n || len(procs) != n {
			return fmt.Errorf("%d pods, %d processes, want %d", len(pods.Items), len(procs), n)
		}
		for _, p := range pods.Items {
			if img := p.Spec.Containers[0].Image; img != r.image {
				return fmt.Errorf("pod %s runs %s", p.Name, img)
			}
		}
		for _, pp := range procs {
			if pp.Image != r.image {
				return fmt.Errorf("pod %s runs %s", pp.Pod, pp.Image)
			}
			if v := replicaVersion(t, pp.C); v != "1.15.0+"+r.version {
				return fmt.Errorf("pod %s says version %s, want 1.15.0+%s", pp.Pod, v, r.version)
			}
		}
		return nil
	}
}

// runPod starts a pod of namespace ns as its kubelet would: the coredns binary its image names
// (images), with the Corefile of the ConfigMap it mounts (as the kubelet mounts it when the pod
// starts), its container's environment and its ServiceAccount's token.
func runPod(t *testing.T, cp *harness.ControlPlane, ns string, images map[string]string) func(p *corev1.Pod) (*harness.CoreDNS, error) {
	return func(p *corev1.Pod) (*harness.CoreDNS, error) {
		ctr := p.Spec.Containers[0]
		bin, ok := images[ctr.Image]
		if !ok {
			return nil, fmt.Errorf("no binary for image %s (ErrImagePull)", ctr.Image)
		}
		corefile, err := mountedCorefile(cp, ns, p.Spec)
		if err != nil {
			return nil, err
		}
		env := podEnv(ns, kubeconfigOf(t, cp, ns, p.Spec.ServiceAccountName), ctr)
		return harness.StartCoreDNS(t, nil, localize(corefile, repoPath(t)), harness.WithEnv(env...), harness.WithBinary(bin)), nil
	}
}

// deploymentDone is `kubectl rollout status`'s verdict: the controller saw the last change, and n
// replicas are updated and available, and no old one is left.
func deploymentDone(d *appsv1.Deployment, n int) error {
	s := d.Status
	if s.ObservedGeneration < d.Generation || int(s.UpdatedReplicas) != n || int(s.AvailableReplicas) != n || int(s.Replicas) != n {
		return fmt.Errorf("Deployment generation %d observed %d: %d replicas, %d updated, %d available", d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas)
	}
	return nil
}

// replicaVersion is the version a replica says of itself (dig CH TXT global's first line).
func replicaVersion(t *testing.T, c *harness.CoreDNS) string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("global.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	m.SetEdns0(dns.MaxMsgSize, false)
	r := c.Exchange(t, m, "tcp")
	for _, rr := range r.Answer {
		if txt, ok := rr.(*dns.TXT); ok {
			for _, f := range strings.Fields(strings.Join(txt.Txt, "")) {
				if v, ok := strings.CutPrefix(f, "version="); ok {
					return v
				}
			}
			break
		}
	}
	return ""
}

// leaderOf is the one process of ps that holds the writer's lease.
func leaderOf(t *testing.T, ps []*harness.PodProcess) (*harness.PodProcess, error) {
	var leaders []*harness.PodProcess
	for _, pp := range ps {
		if pp.C.Metric(t, "coredns_global_leader") == "1" {
			leaders = append(leaders, pp)
		}
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("%d leaders among %d replicas", len(leaders), len(ps))
	}
	return leaders[0], nil
}

// allHeadless reports whether every slice the writer wrote is labelled service.kubernetes.io/headless.
func allHeadless(t *testing.T, cp *harness.ControlPlane) bool {
	t.Helper()
	l, err := cp.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=coredns-global,!" + corev1.IsHeadlessService})
	testkit.Must(t, err)
	return len(l.Items) == 0
}

// writtenVersions are the resourceVersions of everything the writer wrote (install.md's selector).
func writtenVersions(t *testing.T, cp *harness.ControlPlane) map[string]string {
	t.Helper()
	out := writtenIn(t, cp, metav1.NamespaceAll)
	if len(out) < 2 {
		t.Fatalf("the writer wrote %v", out)
	}
	return out
}

// writtenIn are the resourceVersions of what a writer wrote in namespace ns (all: NamespaceAll).
func writtenIn(t *testing.T, cp *harness.ControlPlane, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=coredns-global"}
	out := map[string]string{}
	svcs, err := cp.Client.CoreV1().Services(ns).List(ctx, sel)
	testkit.Must(t, err)
	for _, s := range svcs.Items {
		out["Service/"+s.Namespace+"/"+s.Name] = s.ResourceVersion
	}
	sl, err := cp.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, sel)
	testkit.Must(t, err)
	for _, s := range sl.Items {
		out["EndpointSlice/"+s.Namespace+"/"+s.Name] = s.ResourceVersion
	}
	return out
}

// TestDefaultsRunSideBySide: the previous release starts on the Corefile that the chart,
// deploy/base and `linkerd global install` render by default, so that its pods read the ConfigMap
// this build's upgrade wrote, however they restart (mid-rollout, after `kubectl rollout undo`);
// and the upgrade notes name every option the previous release does not have.
func TestDefaultsRunSideBySide(t *testing.T) {
	t.Parallel()
	prev := previousRelease(t)
	helm := helms(t)["helm4"]
	_, chart := helmTemplate(t, helm)
	// The notes' way to unset a value of a new option, before going back: null renders the
	// default Corefile; and [] is anyone for explain.from.
	for _, set := range []string{"explain.from=null", "linkerd.multiclusterNamespace=null", "clientLocality.ecsFrom=null"} {
		if _, objs := helmTemplate(t, helm, "--set", set); corefileOf(objs) != corefileOf(chart) {
			t.Errorf("--set %s: the Corefile is not the default one:\n%s", set, corefileOf(objs))
		}
	}
	if _, objs := helmTemplate(t, helm, "--set-json", "explain.from=[]"); !strings.Contains(corefileOf(objs), "explain_from 0.0.0.0/0 ::/0\n") {
		t.Errorf("--set-json explain.from=[]: the Corefile:\n%s", corefileOf(objs))
	}
	// The chart's default is the plugin's, which it leaves unrendered.
	var values struct {
		Explain struct{ From []string } `json:"explain"`
	}
	testkit.Must(t, yaml.Unmarshal([]byte(readFile(t, chartPath(t, "values.yaml"))), &values))
	if want := contract.DefaultExplainFrom(); !slices.Equal(values.Explain.From, want) || strings.Contains(corefileOf(chart), "explain_from") {
		t.Errorf("values.yaml's explain.from %q, the plugin's default %q; the default Corefile renders it: %t", values.Explain.From, want, strings.Contains(corefileOf(chart), "explain_from"))
	}
	installed, stderr, code := cli(t, nil, "", "install", "--set", "clusterName=east")
	if code != 0 {
		t.Fatalf("linkerd global install: %d %s", code, stderr)
	}
	_, base := kustomize(t, "deploy/base")
	renders := map[string]string{
		"the chart":              corefileOf(chart),
		"linkerd global install": corefileOf(objectsOf(t, installed)),
		"deploy/base":            corefileOf(base),
	}
	// A token the API server refuses: the replica parses its Corefile, starts and writes nothing.
	kubeconfig, err := cp.KubeconfigFor("not-a-token")
	testkit.Must(t, err)
	for what, corefile := range renders {
		// Refused, the replica never syncs and so never turns ready: started is what its parser decides.
		tmpl := strings.Replace(localize(corefile, repoPath(t)), "ready {{.Ready}}", "", 1)
		c := harness.StartCoreDNS(t, nil, tmpl, harness.WithBinary(prev.binary), harness.WithKubeconfig(kubeconfig),
			harness.WithEnv("KUBECONFIG="+kubeconfig, "CLUSTER_NAME=east", "POD_NAMESPACE=default"))
		c.Stop()
		t.Logf("%s: %s starts on its Corefile", what, prev.version)
	}

	// The options new since the previous release (the README's syntax, then and now) are the
	// ones the upgrade notes list.
	added := slices.DeleteFunc(syntaxOptions(t, readFile(t, repoPath(t, "plugin/global/README.md"))), func(o string) bool {
		return slices.Contains(syntaxOptions(t, readFile(t, filepath.Join(os.Getenv("GLOBAL_PREVIOUS_DIR"), "src", "plugin", "global", "README.md"))), o)
	})
	notes, _, _ := strings.Cut(readFile(t, repoPath(t, "docs/CHANGELOG.md")), "\n### Changes\n") // Unreleased's notes
	const lead = "The options new in this release, "
	_, line, ok := strings.Cut(notes, lead)
	line, _, _ = strings.Cut(line, ":")
	listed := regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(line, -1)
	var names []string
	for _, m := range listed {
		names = append(names, m[1])
	}
	if !ok || !slices.Equal(names, added) {
		t.Errorf("docs/CHANGELOG.md's upgrade notes list the new options as %q (after %q), want %q", names, lead, added)
	}
}

// syntaxOptions are the options of the plugin's README's syntax block, in its order.
func syntaxOptions(t *testing.T, readme string) []string {
	t.Helper()
	_, block, _ := strings.Cut(readme, "global [ZONES...] {\n")
	block, _, ok := strings.Cut(block, "\n}\n")
	if !ok {
		t.Fatal("a README without its syntax block")
	}
	var out []string
	for _, l := range strings.Split(block, "\n") {
		out = append(out, strings.Fields(l)[0])
	}
	return out
}
