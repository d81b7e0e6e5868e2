package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// runbookCommand is a command in a runbook: a span in backticks that starts with a program an
// operator runs. Prose outside backticks names no program (TestRunbooks checks).
var (
	backticked     = regexp.MustCompile("`([^`]*)`")
	runbookCommand = regexp.MustCompile(`^(kubectl|dig|curl|linkerd) `)
	proseCommand   = regexp.MustCompile(`\b(kubectl|dig|curl) |\blinkerd (global|multicluster|check)\b`)
)

// notRun are the runbooks' commands that cannot run here, by prefix, with why.
var notRun = map[string]string{
	"linkerd multicluster ":                                        "Linkerd's own CLI, which needs Linkerd's control plane and gateways: none runs here (the harness writes the objects Linkerd's service mirror writes)",
	"kubectl -n linkerd-multicluster logs ":                        "the logs of Linkerd's own controllers: none runs here",
	"kubectl -n coredns-global top ":                               "needs metrics-server, which does not run here",
	"dig @127.0.0.1 -p 5353 +tcp +short CH TXT foo.db.near.global": "an example of the zone near.global with policy nearest (the chart's policy.byZone), not of the chart's defaults",
}

// diagnoses are the commands whose failure here is what the runbook says it shows, or the
// harness's and not theirs, by command, with what their output must then say.
var diagnoses = map[string]*regexp.Regexp{
	// The alert's state: serviceimports on, the CRD not installed.
	"kubectl get crd serviceimports.multicluster.x-k8s.io": regexp.MustCompile(`NotFound`),
	// Every check passes but one: the harness's cluster has no cluster DNS, which TestCLICheck
	// plays with --cluster-dns-addr.
	"linkerd global check":     checkButForwarding,
	"bin/linkerd-global check": checkButForwarding,
}

// shows is what a runbook says a command finds here, by a part of the command: its output must match.
var shows = map[string]*regexp.Regexp{
	"grep -iE 'skip|not a DNS label|without'":                     regexp.MustCompile(`Service db/baz-west-1: cluster name "West_1" is not a DNS label`),
	"get events -A --field-selector reason=GlobalServiceConflict": regexp.MustCompile(`service/bar-global`),
	"| grep -i conflict": regexp.MustCompile(`writer: db/bar: conflict: db/bar-global exists and is not managed`),
	"| grep owner":       regexp.MustCompile(`writer: owner ClusterRole coredns-global-write \(uid`),
	"| grep 'writer:'":   regexp.MustCompile(`writer: \S+ leads \(lease coredns-global/coredns-global-writer\)`),
}

// checkButForwarding is `linkerd global check` failing only its forwarding check.
var checkButForwarding = regexp.MustCompile(`^[^×]*× the cluster DNS forwards the zones to the plugin\n\s+Service kube-system/kube-dns has no ready endpoint[^×]*Status check results are ×\n$`)

// TestRunbooks runs every command of the alerts' runbooks (deploy/monitoring/rules.yaml), in order,
// as the operator paged would, then install.md's adding and removing a cluster,
// troubleshooting.md's command lines and install.md's `helm test`, on the chart installed with
// install.md's commands: on a control plane whose pods run for real, their logs and port-forwards
// reached through the API server (harness.Kubelet.Serve); `linkerd global` is bin/linkerd-global,
// as Linkerd's CLI runs its extensions; kubectl, dig and curl are the machine's. The cluster holds
// what the alerts look for: a replica that restarted (logs --previous), an object with a problem, a
// global service's name held by a Service the writer did not create, and a linked cluster whose
// gateway is down, then alive (the dead gateway still answered). Each command must exit 0 (a grep
// must find what the runbook says it finds) or fail as its runbook says; a port-forward runs in the
// background for the rest of its runbook; unlinking the cluster takes its records out of the
// answers.
func TestRunbooks(t *testing.T) {
	t.Parallel()
	own := harness.StartWith(t, harness.Options{Controllers: []string{"deployment", "replicaset"}, Scheduler: true})
	ctx := context.Background()
	c := own.Client
	cur := thisBuild(t)
	const ns, doc = "coredns-global", "docs/install.md"

	// The mesh: this cluster's foo (two ready pods), west's mirror of it and west's bar; a
	// mirror whose cluster name is no DNS label; bar-global, a Service not the writer's.
	testkit.Must(t, harness.EnsureNamespace(ctx, c, "db"))
	localFooIn(t, c, "db")
	_, err := harness.CreateMirror(ctx, c, mirror("db", "west", true, true))
	testkit.Must(t, err)
	_, err = harness.CreateMirror(ctx, c, mirrorOf("db", "bar", "west", true))
	testkit.Must(t, err)
	nameCluster(t, own, "east", "west")
	dyn, err := dynamic.NewForConfig(own.Config)
	testkit.Must(t, err)
	// As install.md has it: the Link labelled with west's locality.
	westLocality := map[string]string{corev1.LabelTopologyRegion: "us-west-2", corev1.LabelTopologyZone: "us-west-2a"}
	testkit.Must(t, harness.ApplyLink(ctx, dyn, "linkerd-multicluster", "west", westLocality))
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "baz-west-1", Namespace: "db", Labels: map[string]string{
			"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "West_1"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bar-global", Namespace: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}}},
	} {
		_, err := c.CoreV1().Services("db").Create(ctx, s, metav1.CreateOptions{})
		testkit.Must(t, err)
	}
	var nodes []string
	for i := range 3 {
		nodes = append(nodes, fmt.Sprintf("node-%d", i))
		testkit.Must(t, createSchedulableNode(ctx, c, nodes[i], []string{"us-east-1a", "us-east-1b"}[i%2]))
	}
	k := harness.NewKubelet(t, own, ns, runPod(t, own, ns, map[string]string{cur.image: cur.binary}))
	testkit.Must(t, k.Serve(ctx, nodes...))

	// Install as install.md does; then one replica crashes, and its kubelet starts it again.
	docNamespace(t, own, doc)
	harness.RunHelm(t, helms(t)["helm4"], own, docCommand(t, doc, "helm install coredns-global ")...)
	d, err := c.AppsV1().Deployments(ns).Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	replicas := int(*d.Spec.Replicas)
	k.Until("the release rolled out", rolledOutTo(t, k, own, cur, replicas))
	crashed := k.Running()[0]
	crashed.C.Kill()
	k.Until("the crashed replica restarted", func() error {
		if crashed.Restarts != 1 || crashed.C.Exited() {
			return fmt.Errorf("%s: %d restarts", crashed.Pod, crashed.Restarts)
		}
		return rolledOutTo(t, k, own, cur, replicas)()
	})
	_, err = harness.SetGateway(ctx, c, "west", false)
	testkit.Must(t, err)

	op := newOperator(t, own, k)
	used := map[string]bool{}
	for _, alert := range alerts(t) {
		if alert.name == "CoreDNSGlobalDeadGatewayAnswered" {
			_, err = harness.SetGateway(ctx, c, "west", true)
			testkit.Must(t, err)
		}
		k.Until(alert.name+": the release running", rolledOutTo(t, k, own, cur, replicas))
		// <pod> is the one that restarted, until a runbook deletes it; then any.
		pod := k.Running()[0]
		if slices.Contains(k.Running(), crashed) {
			pod = crashed
		}
		var leader *harness.PodProcess
		k.Until(alert.name+": a leader", func() (err error) { leader, err = leaderOf(t, k.Running()); return err })
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Pod, metav1.GetOptions{})
		testkit.Must(t, err)
		fill := strings.NewReplacer("{{ $labels.instance }}", p.Status.PodIP+":9153", "{{ $labels.cluster }}", "west",
			"<leader pod>", leader.Pod, "<pod>", pod.Pod)
		for _, command := range alert.commands {
			command = fill.Replace(command)
			op.do(alert.name, command, used)
		}
		op.stopBackground()
		if _, err := dyn.Resource(harness.LinkResource).Namespace("linkerd-multicluster").Get(ctx, "west", metav1.GetOptions{}); err == nil {
			continue
		}
		// Unlinked: west's records leave the answers; then linked again for the next runbook.
		harness.Eventually(t, alert.name+": west's records gone", func() error { return answers(t, k.Running()[0].C, "foo.db.global.", 2) })
		testkit.Must(t, harness.ApplyLink(ctx, dyn, "linkerd-multicluster", "west", westLocality))
		if alert.name == "CoreDNSGlobalDeadGatewayAnswered" {
			harness.Eventually(t, "west's records back", func() error { return answers(t, k.Running()[0].C, "foo.db.global.", 4) })
		}
	}
	addAndRemoveCluster(t, own, k, op, used)
	troubleshoot(t, own, op, used)
	helmTest(t, k, op)
	for prefix := range notRun {
		if !used[prefix] {
			t.Errorf("no runbook has a command starting %q: drop it from notRun", prefix)
		}
	}
}

// addAndRemoveCluster runs install.md's "Adding and removing a cluster" as written, playing
// Linkerd's part (the Link and mirrors of north, without labels, as Linkerd makes them; then, as
// its unlinking, nothing: the block deletes them): north answered with the locality its Link was
// given, in the written slices too; then gone from the answers, the slices and the status.
func addAndRemoveCluster(t *testing.T, cp *harness.ControlPlane, k *harness.Kubelet, op *operator, used map[string]bool) {
	ctx := context.Background()
	const doc, step = "docs/install.md", "install.md: a cluster added"
	north, err := harness.CreateMirror(ctx, cp.Client, mirror("db", "north", true, true))
	testkit.Must(t, err)
	dyn, err := dynamic.NewForConfig(cp.Config)
	testkit.Must(t, err)
	testkit.Must(t, harness.ApplyLink(ctx, dyn, "linkerd-multicluster", "north", nil))
	k.Until(step+": north answered", func() error { return answers(t, k.Running()[0].C, "foo.db.global.", 6) })
	var outs []string
	for _, command := range docLines(t, doc, "label link north") {
		outs = append(outs, op.do(step, command, used))
	}
	if status := outs[1]; !regexp.MustCompile(`(?m)^north +region:eu-west-1,zone:eu-west-1a +link `).MatchString(status) {
		t.Errorf("%s: linkerd global status:\n%s", step, status)
	}
	for _, ip := range []string{north.ClusterIPs["foo-0"], north.ClusterIPs["foo-1"]} {
		if !strings.Contains(outs[2], ip) {
			t.Errorf("%s: linkerd global explain has no %s:\n%s", step, ip, outs[2])
		}
	}
	harness.Eventually(t, step+": north written", func() error {
		return writtenSlices(t, cp.Client, "db", map[string]int{"east": 3, "west": 2, "north": 2})
	})

	const gone = "install.md: a cluster removed"
	for _, command := range docLines(t, doc, "delete link north") {
		op.do(gone, command, used)
	}
	k.Until(gone+": north's records out", func() error { return answers(t, k.Running()[0].C, "foo.db.global.", 4) })
	harness.Eventually(t, gone+": north's endpoints out of the written slices", func() error {
		return writtenSlices(t, cp.Client, "db", map[string]int{"east": 3, "west": 2})
	})
	if status, err := op.run("linkerd global status"); err != nil || strings.Contains(status, "\nnorth ") {
		t.Errorf("%s: linkerd global status: %v\n%s", gone, err, status)
	}
}

// troubleshootingRunnable are the spans of docs/troubleshooting.md that are whole command lines;
// the others that name a program are references to one (`dig CH TXT`, `linkerd viz`) or, dig
// without @, asked from a pod through the cluster's DNS.
var troubleshootingRunnable = regexp.MustCompile(`^(kubectl -n \S+ \S+ \S+.*|linkerd global (check|status|version|install)( .*)?|linkerd global explain \S+.*|bin/linkerd-global \S+.*|dig @.*)$`)

// placeholder is a word of a command template (`linkerd global explain NAME --from pod/NS/X`).
var placeholder = regexp.MustCompile(`\b(NAME|NAMESPACE|NS|X)\b`)

// troubleshoot runs docs/troubleshooting.md's command lines in order, in backticks or after a
// $ prompt: the Link's label in the state its section describes, a Link without locality.
func troubleshoot(t *testing.T, cp *harness.ControlPlane, op *operator, used map[string]bool) {
	const doc = "docs/troubleshooting.md"
	text := readFile(t, repoPath(t, doc))
	dyn, err := dynamic.NewForConfig(cp.Config)
	testkit.Must(t, err)
	prompt := regexp.MustCompile("(?m)^\\s*\\$ (.*)$|`([^`]*)`")
	ran := 0
	for _, m := range prompt.FindAllStringSubmatch(text, -1) {
		command := strings.Join(strings.Fields(m[1]+m[2]), " ")
		if !runbookCommand.MatchString(command) {
			continue
		}
		if !troubleshootingRunnable.MatchString(command) || placeholder.MatchString(command) {
			why := "a reference to a command, or a template"
			if strings.HasPrefix(command, "dig ") {
				why = "asked from a pod through the cluster's DNS, which the harness has none of (TestProtocolCompliance and TestExplain ask the replicas the same)"
			}
			t.Logf("%s: not run: %s: %s", doc, command, why)
			continue
		}
		if strings.Contains(command, "label link west ") {
			testkit.Must(t, harness.ApplyLink(context.Background(), dyn, "linkerd-multicluster", "west", nil))
		}
		op.do(doc, strings.TrimSuffix(command, " &"), used)
		ran++
	}
	op.stopBackground()
	if ran < 10 {
		t.Errorf("%s: %d commands run: the spans were not found", doc, ran)
	}
}

// helmTest runs install.md's `helm test` as written: while the cluster's DNS does not forward the
// zone, it fails and its log says so; once it does (install.md's forward block, to a replica here),
// it passes. The test pod runs as its kubelet would run it, its dig asking the resolver of its own
// /etc/resolv.conf (dnsPolicy ClusterFirst, in a mount namespace of its own): the cluster DNS,
// played by a coredns on 127.0.0.1:53.
func helmTest(t *testing.T, k *harness.Kubelet, op *operator) {
	const doc, step = "docs/install.md", "install.md: helm test"
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	testkit.Must(t, os.WriteFile(resolv, []byte("nameserver 127.0.0.1\nsearch coredns-global.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644))
	k.RunJob = func(p *corev1.Pod) (*harness.Job, error) {
		ctr := p.Spec.Containers[0]
		argv := append([]string{"unshare", "--mount", "--map-root-user", "sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolv}, append(ctr.Command, ctr.Args...)...)
		return harness.StartJob(t, t.TempDir(), nil, argv...)
	}
	command := "helm " + strings.Join(docCommand(t, doc, "helm test "), " ")

	// The harness's own port first (it waits on it), then the cluster DNS's.
	const port = ".:{{.Port}} {\n    errors\n}\n"
	clusterDNS := harness.StartCoreDNS(t, nil, port+".:53 {\n    bind 127.0.0.1\n    errors\n}\n")
	out, err := op.run(command)
	if err == nil || !strings.Contains(out, "FAIL: the cluster DNS does not forward global. to coredns-global") {
		t.Errorf("%s, the zone not forwarded: `%s`: %v\n%s", step, command, err, out)
	}
	clusterDNS.Stop()
	replica := k.Running()[0].C
	harness.StartCoreDNS(t, nil, port+"global:53 {\n    bind 127.0.0.1\n    forward . "+replica.Addr+"\n}\n.:53 {\n    bind 127.0.0.1\n    errors\n}\n")
	if out, err := op.run(command); err != nil || !strings.Contains(out, "ok: the cluster DNS answers the SOA of global. from coredns-global") {
		t.Errorf("%s, the zone forwarded: `%s`: %v\n%s", step, command, err, out)
	} else {
		t.Logf("%s: `%s`:\n%s", step, command, out)
	}
}

// docLines are the command lines of doc's fenced block that holds text.
func docLines(t *testing.T, doc, text string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(docBlock(t, doc, text), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// alert is an alerting rule's name and the commands of its runbook, in order.
type alert struct {
	name     string
	commands []string
}

// alerts are rules.yaml's alerts; an alert whose runbook names a program outside backticks fails the test.
func alerts(t *testing.T) []alert {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	testkit.Must(t, yaml.Unmarshal([]byte(readFile(t, repoPath(t, "deploy/monitoring/rules.yaml"))), &rules))
	var out []alert
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			a := alert{name: r.Alert}
			runbook := r.Annotations["runbook"]
			for _, m := range backticked.FindAllStringSubmatch(runbook, -1) {
				if runbookCommand.MatchString(m[1]) {
					a.commands = append(a.commands, m[1])
				}
			}
			if prose := proseCommand.FindString(backticked.ReplaceAllString(runbook, "")); prose != "" {
				t.Errorf("%s: its runbook names %q outside backticks, a command no test runs", r.Alert, prose)
			}
			if len(a.commands) == 0 {
				t.Errorf("%s: its runbook has no command", r.Alert)
			}
			out = append(out, a)
		}
	}
	return out
}

// operator runs runbook commands as an operator's shell does: bash, the admin's kubeconfig,
// kubectl of the control plane, `linkerd global ...` run as Linkerd's CLI runs an extension
// (linkerd-global ..., EXTENSIONS.md), from the repository's root.
type operator struct {
	t   *testing.T
	k   *harness.Kubelet
	env []string
	dir string
	bg  []*exec.Cmd
}

func newOperator(t *testing.T, cp *harness.ControlPlane, k *harness.Kubelet) *operator {
	t.Helper()
	kubectl, err := harness.Kubectl()
	testkit.Must(t, err)
	cliBin, err := harness.Built(EnvCLIBin, "build")
	testkit.Must(t, err)
	shims := t.TempDir()
	linkerd := "#!/bin/sh\n# Linkerd's CLI runs `linkerd NAME ...` as linkerd-NAME ... (its EXTENSIONS.md); only global is here.\n" +
		"[ \"$1\" = global ] || { echo \"linkerd $1: not here\" >&2; exit 127; }\nshift\nexec " + cliBin + " \"$@\"\n"
	testkit.Must(t, os.WriteFile(filepath.Join(shims, "linkerd"), []byte(linkerd), 0o755))
	testkit.Must(t, os.Symlink(helms(t)["helm4"], filepath.Join(shims, "helm")))
	env := append(os.Environ(), "PATH="+shims+":"+filepath.Dir(kubectl)+":"+os.Getenv("PATH"), "KUBECONFIG="+cp.Kubeconfig)
	return &operator{t: t, k: k, env: env, dir: repoPath(t)}
}

// do runs one command of alert's runbook: a port-forward in the background until stopBackground,
// any other to its end; what it must do is above (TestRunbooks).
func (o *operator) do(alert, command string, used map[string]bool) string {
	t := o.t
	for prefix, why := range notRun {
		if strings.HasPrefix(command, prefix) {
			used[prefix] = true
			t.Logf("%s: not run: %s: %s", alert, command, why)
			return ""
		}
	}
	if strings.Contains(command, " port-forward ") {
		o.background(alert, command)
		return ""
	}
	out, err := o.run(command)
	if want, ok := diagnoses[command]; ok && err != nil && want.MatchString(out) {
		return out
	}
	if err != nil || strings.TrimSpace(out) == "" {
		t.Errorf("%s: `%s`: %v, printed:\n%s", alert, command, err, out)
		return out
	}
	for part, want := range shows {
		if strings.Contains(command, part) && !want.MatchString(out) {
			t.Errorf("%s: `%s` does not show %s:\n%s", alert, command, want, out)
		}
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	t.Logf("%s: `%s`: %s ...", alert, command, first)
	return out
}

// run runs command to its end, the kubelets playing meanwhile (kubectl delete pod waits for them).
func (o *operator) run(command string) (string, error) {
	var out bytes.Buffer
	cmd := o.command(command, &out)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(harness.Patience)
	for {
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(100 * time.Millisecond):
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				<-done
				return out.String(), fmt.Errorf("still running after %v", harness.Patience)
			}
			if err := o.k.Sync(); err != nil {
				o.t.Logf("kubelet: %v", err)
			}
		}
	}
}

// background starts a port-forward and waits until it forwards.
func (o *operator) background(alert, command string) {
	out := &lockedBuffer{}
	cmd := o.command("exec "+command, out)
	testkit.Must(o.t, cmd.Start())
	o.bg = append(o.bg, cmd)
	harness.Eventually(o.t, alert+": "+command, func() error {
		if !strings.Contains(out.String(), "Forwarding from") {
			return fmt.Errorf("printed %q", out.String())
		}
		return nil
	})
}

// stopBackground stops the port-forwards, as the operator does at the end of a runbook.
func (o *operator) stopBackground() {
	for _, cmd := range o.bg {
		cmd.Process.Kill()
		cmd.Wait()
	}
	o.bg = nil
}

func (o *operator) command(command string, out interface{ Write([]byte) (int, error) }) *exec.Cmd {
	cmd := exec.Command("bash", "-c", command)
	cmd.Dir, cmd.Env = o.dir, o.env
	cmd.Stdout, cmd.Stderr = out, out
	return cmd
}

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
