package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// EnvCLIBin names bin/linkerd-global, the Linkerd extension CLI `make build` builds.
const EnvCLIBin = "GLOBAL_CLI_BIN"

// cli runs bin/linkerd-global with args against cp (when not nil) and returns its stdout, stderr
// and exit status.
func cli(t *testing.T, cp *harness.ControlPlane, stdin string, args ...string) (string, string, int) {
	t.Helper()
	bin, err := harness.Built(EnvCLIBin, "build")
	testkit.Must(t, err)
	if cp != nil {
		args = append(args, "--kubeconfig", cp.Kubeconfig)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("linkerd-global %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// cliExamples are the Example lines of every command of bin/linkerd-global, as its --help prints
// them, by command.
func cliExamples(t *testing.T) map[string][]string {
	t.Helper()
	root, _, _ := cli(t, nil, "", "--help")
	_, list, _ := strings.Cut(root, "Available Commands:\n")
	out := map[string][]string{}
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		if f[0] == "help" || f[0] == "completion" {
			continue
		}
		help, _, _ := cli(t, nil, "", f[0], "--help")
		_, examples, ok := strings.Cut(help, "Examples:\n")
		if !ok {
			t.Errorf("linkerd global %s --help has no example", f[0])
			continue
		}
		for _, ex := range strings.Split(examples, "\n") {
			if ex = strings.TrimSpace(ex); ex == "" {
				break
			}
			out[f[0]] = append(out[f[0]], ex)
		}
	}
	if len(out) < 6 {
		t.Errorf("examples of only %v", slices.Sorted(maps.Keys(out)))
	}
	return out
}

// runExample runs an example as a shell would, against cp: linkerd global is bin/linkerd-global
// and kubectl the pinned one, both with cp's kubeconfig, and the CLI reaches pods at their IPs
// (--direct-pods: the control plane has no kubelet to port-forward through). It returns the
// output and whether the command succeeded.
func runExample(t *testing.T, cp *harness.ControlPlane, example string) (string, bool) {
	t.Helper()
	bin, err := harness.Built(EnvCLIBin, "build")
	testkit.Must(t, err)
	kubectl, err := harness.Kubectl()
	testkit.Must(t, err)
	script := `linkerd() { [ "$1" = global ] || return 2; shift; "$CLI" "$@" --kubeconfig "$KC" --direct-pods; }
kubectl() { "$KUBECTL" --kubeconfig "$KC" "$@"; }
set -o pipefail
` + example
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "CLI="+bin, "KUBECTL="+kubectl, "KC="+cp.Kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// checkJSON is Linkerd's check JSON (linkerd2 pkg/healthcheck CheckOutput), as `linkerd check` parses it.
type checkJSON struct {
	Success    bool `json:"success"`
	Categories []struct {
		Name   string `json:"categoryName"`
		Checks []struct {
			Description, Hint, Error, Result string
		} `json:"checks"`
	} `json:"categories"`
}

// runCheck runs `check -o json` with args and parses it: the failed checks by description
// (warnings too), and the exit status.
func runCheck(t *testing.T, cp *harness.ControlPlane, args ...string) (map[string]string, int, checkJSON) {
	t.Helper()
	out, stderr, code := cli(t, cp, "", append([]string{"check", "-o", "json", "--wait", "0s"}, args...)...)
	var res checkJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("check -o json: %v\n%s\n%s", err, out, stderr)
	}
	failed := map[string]string{}
	n := 0
	for _, c := range res.Categories {
		for _, ch := range c.Checks {
			n++
			if ch.Result != "success" {
				failed[ch.Description] = ch.Result + ": " + ch.Error
			}
			if ch.Result != "success" && ch.Result != "warning" && ch.Result != "error" || ch.Result != "success" && !strings.Contains(ch.Hint, "troubleshooting.md#") {
				t.Errorf("check %q: result %q, hint %q", ch.Description, ch.Result, ch.Hint)
			}
		}
	}
	if n == 0 || res.Success != (code == 0) {
		t.Errorf("check: %d checks, success %t, exit status %d", n, res.Success, code)
	}
	return failed, code, res
}

// wantFailure waits until check fails with exit status 1, naming the check description
// with an error saying says.
func wantFailure(t *testing.T, cp *harness.ControlPlane, description, says string, args ...string) {
	t.Helper()
	harness.Eventually(t, "check to fail "+description, func() error {
		failed, code, _ := runCheck(t, cp, args...)
		if code != 1 || !strings.HasPrefix(failed[description], "error: ") || !strings.Contains(failed[description], says) {
			return fmt.Errorf("exit %d, failed %v; want %q failing with %q", code, failed, description, says)
		}
		return nil
	})
}

// startReplicasVia starts n bin/coredns processes as the release's pods, reaching the API server
// through p: its ConfigMap's Corefile, its Deployment's environment, its ServiceAccount's token.
func startReplicasVia(t *testing.T, cp *harness.ControlPlane, p *harness.Proxy, ns, name string, n int) []*harness.CoreDNS {
	t.Helper()
	ctx := context.Background()
	tr, err := cp.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](3600)}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	kubeconfig, err := cp.KubeconfigVia(p, tr.Status.Token)
	testkit.Must(t, err)
	d, err := cp.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	testkit.Must(t, err)
	env := podEnv(ns, kubeconfig, d.Spec.Template.Spec.Containers[0])
	corefile, err := mountedCorefile(cp, ns, d.Spec.Template.Spec)
	testkit.Must(t, err)
	var out []*harness.CoreDNS
	for range n {
		out = append(out, harness.StartCoreDNS(t, nil, localize(corefile, repoPath(t)), harness.WithEnv(env...)))
	}
	return out
}

// createReplicaPod makes the Pod a kubelet would report for process c, one of the Deployment's
// replicas: of its template (as its ReplicaSet would: kubernetes pkg/controller/controller_utils.go
// GetPodFromTemplate; so the namespace's Pod Security admits it), Running and Ready at 127.0.0.1,
// its DNS and metrics ports c's.
func createReplicaPod(t *testing.T, cp *harness.ControlPlane, ns, name string, c *harness.CoreDNS) {
	t.Helper()
	ctx := context.Background()
	d, err := cp.Client.AppsV1().Deployments(ns).Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	spec := d.Spec.Template.Spec
	spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "dns-tcp", ContainerPort: int32(portOf(t, c.Addr)), Protocol: corev1.ProtocolTCP}}
	if c.MetricsAddr != "" {
		spec.Containers[0].Ports = append(spec.Containers[0].Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: int32(portOf(t, c.MetricsAddr)), Protocol: corev1.ProtocolTCP})
	}
	createRunningPod(t, cp, ns, name, "127.0.0.1", d.Spec.Template.Labels, spec)
}

// createRunningPod creates a Pod with labels and spec, and reports it Running and Ready at ip
// through the status subresource, as a kubelet would.
func createRunningPod(t *testing.T, cp *harness.ControlPlane, ns, name, ip string, labels map[string]string, spec corev1.PodSpec) {
	t.Helper()
	ctx := context.Background()
	pod, err := cp.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: spec}, metav1.CreateOptions{})
	testkit.Must(t, err)
	harness.SetPodStatus(pod, harness.Pod{IP: ip, Ready: true})
	_, err = cp.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	testkit.Must(t, err)
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	testkit.Must(t, err)
	n, err := strconv.Atoi(p)
	testkit.Must(t, err)
	return n
}

// setDeploymentAvailable reports n replicas of the Deployment up to date and available, as its
// controller would (kubernetes pkg/controller/deployment/sync.go calculateStatus).
func setDeploymentAvailable(t *testing.T, cp *harness.ControlPlane, ns, name string, n int32) {
	t.Helper()
	ctx := context.Background()
	testkit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := cp.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = d.Generation, n, n, n, n
		_, err = cp.Client.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		return err
	}))
}

// stockCoreDNS starts bin/coredns with a Corefile of in-tree plugins only.
func stockCoreDNS(t *testing.T, corefile string) *harness.CoreDNS {
	t.Helper()
	return harness.StartCoreDNS(t, nil, corefile)
}

// kubeDNS makes c, listening on ip, the cluster's kube-dns: Service kube-system/kube-dns, as
// kubeadm names it, with c as its one ready pod.
func kubeDNS(t *testing.T, cp *harness.ControlPlane, ip string, c *harness.CoreDNS) {
	t.Helper()
	labels := map[string]string{"k8s-app": "kube-dns"}
	_, err := cp.Client.CoreV1().Services("kube-system").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: labels},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("dns")},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("dns-tcp")},
		}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
	port := int32(portOf(t, c.Addr))
	// On a Node: the EndpointSlice controller leaves out pods on none.
	testkit.Must(t, harness.CreateNode(context.Background(), cp.Client, harness.Node{Name: "dns-node", Zone: "us-east-1a", Region: "us-east-1"}))
	createRunningPod(t, cp, "kube-system", "coredns-0", ip, labels, corev1.PodSpec{NodeName: "dns-node", Containers: []corev1.Container{{Name: "coredns", Image: "coredns",
		Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: port, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: port, Protocol: corev1.ProtocolTCP}}}}})
}

// dropVerb removes verb from the rules of ClusterRole role on resource, and returns what puts it back.
func dropVerb(t *testing.T, cp *harness.ControlPlane, role, resource, verb string) func() {
	t.Helper()
	ctx := context.Background()
	cr, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	testkit.Must(t, err)
	before := cr.DeepCopy()
	for i, r := range cr.Rules {
		if slices.Contains(r.Resources, resource) {
			cr.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == verb })
		}
	}
	_, err = cp.Client.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{})
	testkit.Must(t, err)
	return func() {
		t.Helper()
		cur, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
		testkit.Must(t, err)
		cur.Rules = before.Rules
		_, err = cp.Client.RbacV1().ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
		testkit.Must(t, err)
	}
}

// TestCLIInstall: the install guide's command renders what the API server accepts (a server-side
// dry run), with no image value: the CLI runs the image of its own build, the one `make image`
// named. Installing another build over it changes the Deployment's pod template, so it rolls.
func TestCLIInstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	testkit.Must(t, harness.EnsureNamespace(ctx, client(), "coredns-global"))
	args := docCommand(t, "docs/install.md", "linkerd global install ")
	pipe := slices.Index(args, "|")
	if pipe < 0 || strings.Join(args[pipe+1:], " ") != "kubectl apply -f -" {
		t.Fatalf("docs/install.md: linkerd global install %s", strings.Join(args, " "))
	}
	out, stderr, code := cli(t, nil, "", args[1:pipe]...)
	if code != 0 {
		t.Fatalf("install: %s", stderr)
	}
	harness.RunKubectl(t, cp, out, "apply", "-f", "-", "--dry-run=server")
	objs := objectsOf(t, out)
	if ns := objs["Namespace/coredns-global"]; ns == nil || ns.GetLabels()["linkerd.io/extension"] != "global" {
		t.Errorf("install's Namespace: %v", ns)
	}
	cur := thisBuild(t)
	if img := as[appsv1.Deployment](t, objs["Deployment/coredns-global"]).Spec.Template.Spec.Containers[0].Image; img != cur.image {
		t.Errorf("install runs %s; make image built %s", img, cur.image)
	}
	if v, _, _ := cli(t, nil, "", "version", "--client"); v != "Client version: "+cur.version+"\n" {
		t.Errorf("version --client: %q, want %s", v, cur.version)
	}

	// An upgrade with the CLI: the Deployment as the previous build's CLI installed it, then this one's.
	own := harness.Start(t)
	old, stderr, code := cli(t, nil, "", "install", "--set", "clusterName=east,image.tag=0.1.0")
	if code != 0 {
		t.Fatalf("install: %s", stderr)
	}
	harness.RunKubectl(t, own, old, "apply", "-f", "-")
	before, err := own.Client.AppsV1().Deployments("coredns-global").Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	harness.RunKubectl(t, own, out, "apply", "-f", "-")
	after, err := own.Client.AppsV1().Deployments("coredns-global").Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	if after.Generation == before.Generation || after.Spec.Template.Spec.Containers[0].Image != cur.image {
		t.Errorf("applying this build's install over 0.1.0's: generation %d -> %d, image %s: the pods would not roll",
			before.Generation, after.Generation, after.Spec.Template.Spec.Containers[0].Image)
	}
}

// TestCLINotInstalled: where the extension is not installed, `linkerd check` does not run its
// checks, and `linkerd global check` fails, saying so. Linkerd runs an extension's checks where a
// Namespace labelled linkerd.io/extension=<name> exists, and elsewhere only when its
// _extension-metadata says "checks":"always" (linkerd2 cli/cmd/check_extensions.go, findExtensions
// and findAlwaysChecks); every way of installing labels its namespace (the CLI's, deploy/base's,
// install.md's commands before helm install: TestFirstDay, TestCLIInstall). Linkerd asks every
// linkerd-* on the PATH for its metadata on every run: the answer needs no cluster.
func TestCLINotInstalled(t *testing.T) {
	t.Parallel()
	own := harness.Start(t) // of its own: nothing of the extension on it
	bin, err := harness.Built(EnvCLIBin, "build")
	testkit.Must(t, err)
	cmd := exec.Command(bin, "_extension-metadata")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent/kubeconfig")
	out, err := cmd.Output()
	var meta map[string]any
	if err != nil || json.Unmarshal(out, &meta) != nil || meta["name"] != "linkerd-global" || meta["checks"] == "always" {
		t.Errorf("_extension-metadata without a cluster: %v, %s", err, out)
	}
	_, objs := kustomize(t, "deploy/base")
	if ns := objs["Namespace/coredns-global"]; ns == nil || ns.GetLabels()["linkerd.io/extension"] != "global" {
		t.Errorf("deploy/base's Namespace is not labelled linkerd.io/extension=global: %v", ns)
	}

	failed, code, _ := runCheck(t, own)
	if code != 1 || !strings.Contains(failed["linkerd-global Namespace exists"], "no Namespace labelled linkerd.io/extension=global") {
		t.Errorf("check where nothing is installed: exit %d, %v", code, failed)
	}
	if failed, code, _ := runCheck(t, own, "--pre"); code != 0 {
		t.Errorf("check --pre where nothing is installed: exit %d, %v", code, failed)
	}
}
