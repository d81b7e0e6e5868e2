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

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// EnvCLIBin names bin/linkerd-global, the Linkerd extension CLI `make build` builds.
const EnvCLIBin = "GLOBAL_CLI_BIN"

// cli runs bin/linkerd-global with args against cp (when not nil) and returns its stdout, stderr
// and exit status.
func cli(t *testing.T, cp *harness.ControlPlane, stdin string, args ...string) (string, string, int) {
	t.Helper()
	bin, err := harness.Built(EnvCLIBin, "build")
	must(t, err)
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
	must(t, err)
	kubectl, err := harness.Kubectl()
	must(t, err)
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
	eventually(t, "check to fail "+description, func() error {
		failed, code, _ := runCheck(t, cp, args...)
		if code != 1 || !strings.HasPrefix(failed[description], "error: ") || !strings.Contains(failed[description], says) {
			return fmt.Errorf("exit %d, failed %v; want %q failing with %q", code, failed, description, says)
		}
		return nil
	})
}

// TestCLICheck installs the extension with `linkerd global install | kubectl apply`, runs two
// replicas as its pods (bin/coredns with the installed Corefile, as the ServiceAccount), a stock
// bin/coredns as kube-dns, and checks: all pass; then each fault fails its check, exit status 1.
func TestCLICheck(t *testing.T) {
	t.Parallel()
	cp := harness.Start(t) // of its own: the extension's cluster-scoped objects
	ctx := context.Background()
	must(t, cp.InstallTopologyCRDs(ctx))
	dyn, err := dynamic.NewForConfig(cp.Config)
	must(t, err)
	const ns = "coredns-global"
	manifests, stderr, code := cli(t, nil, "", "install", "--set", "clusterName=east,replicas=2,priorityClass.create=true,image.repository=ghcr.io/globaldns/coredns-global",
		"--set", "linkerd.mirrorPolicy=true", "--set-json", `localities={"east":{"zone":"us-east-1a","region":"us-east-1"}}`)
	if code != 0 {
		t.Fatalf("install: %s", stderr)
	}
	// west's mirror, made before the mirror policy: here the admin plays Linkerd's service mirror.
	must(t, harness.EnsureNamespace(ctx, cp.Client, "db"))
	_, err = harness.CreateMirror(ctx, cp.Client, mirror("db", "west", true, true))
	must(t, err)
	harness.RunKubectl(t, cp, manifests, "apply", "-f", "-")

	proxy := harness.StartProxy(t, cp.APIServerAddr())
	replicas := startReplicasVia(t, cp, proxy, ns, "coredns-global", 2)
	for i, c := range replicas {
		createReplicaPod(t, cp, ns, fmt.Sprintf("coredns-global-%d", i), c)
	}
	setDeploymentAvailable(t, cp, ns, "coredns-global", 2)
	// The cluster DNS at the host's own address: an EndpointSlice may not hold a loopback one.
	host := hostAddr(t)
	kubeDNS(t, cp, host, stockCoreDNS(t, "global:{{.Port}} {\n    bind 127.0.0.1 "+host+"\n    forward . "+replicas[0].Addr+"\n}\n"))
	must(t, harness.EnsureNamespace(ctx, cp.Client, "linkerd-multicluster"))
	must(t, harness.ApplyLink(ctx, dyn, "linkerd-multicluster", "west", map[string]string{"topology.kubernetes.io/zone": "us-east-1b", "topology.kubernetes.io/region": "us-east-1"}))
	must(t, harness.CreateNode(ctx, cp.Client, harness.Node{Name: "east-a", Zone: "us-east-1a", Region: "us-east-1"}))
	must(t, harness.CreateStatefulSet(ctx, cp.Client, harness.StatefulSet{Namespace: "db", Service: "foo", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "foo-0", Node: "east-a", IP: "10.244.1.10", Ready: true}}}))
	waitLeader(t, replicas...)
	eventually(t, "the written slices", func() error { return writtenSlices(t, cp.Client, "db", map[string]int{"east": 1, "west": 2}) })

	direct := "--direct-pods" // the control plane has no kubelet to port-forward through
	t.Run("healthy", func(t *testing.T) {
		eventually(t, "every check to pass", func() error {
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
		for _, want := range []string{"linkerd-global\n--------------\n√ can initialize the client\n", "√ every replica reports synced\n",
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
	})

	t.Run("status", func(t *testing.T) {
		out, stderr, code := cli(t, cp, "", "status", direct, "-o", "json")
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
		table, _, _ := cli(t, cp, "", "status", direct)
		if !strings.HasPrefix(table, "CLUSTER  LOCALITY") || !strings.Contains(table, "\nwest     region:us-east-1,zone:us-east-1b  link  ") {
			t.Errorf("status:\n%s", table)
		}
	})

	t.Run("explain", func(t *testing.T) {
		out, stderr, code := cli(t, cp, "", "explain", "foo.db.global", direct)
		for _, want := range []string{"foo.db.global. (NOERROR)\n", "service", "db/foo", "ADDR", "10.244.1.10", "west", "ready"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("explain (exit %d) has no %q:\n%s%s", code, want, out, stderr)
			}
		}
		out, _, code = cli(t, cp, "", "explain", "nope.db.global", direct, "-o", "json")
		var res struct {
			Rcode string
			Lines []map[string]string
		}
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Rcode != "NXDOMAIN" || len(res.Lines) != 1 || !strings.HasPrefix(res.Lines[0]["exists"], "false") {
			t.Errorf("explain -o json: exit %d, %v, %+v", code, err, res)
		}
	})

	t.Run("zone not forwarded", func(t *testing.T) {
		public := stockCoreDNS(t, `.:{{.Port}} {
    template IN SOA global {
        answer "global. 3600 IN SOA a0.nic.global. hostmaster.donuts.email. 1 7200 900 1209600 3600"
    }
}
`)
		wantFailure(t, cp, "the cluster DNS forwards the zones to the plugin", "a0.nic.global.", direct, "--cluster-dns-addr", public.Addr)
		nothing := stockCoreDNS(t, ".:{{.Port}} {\n    whoami\n}\n")
		wantFailure(t, cp, "the cluster DNS forwards the zones to the plugin", "no SOA", direct, "--cluster-dns-addr", nothing.Addr)
	})

	t.Run("NodeLocal DNSCache without the stub", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "node-local-dns", Namespace: "kube-system"},
			Data: map[string]string{"Corefile": ".:53 {\n    bind 169.254.20.10\n    forward . __PILLAR__UPSTREAM__SERVERS__\n}\n"}}
		_, err := cp.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
		must(t, err)
		wantFailure(t, cp, "NodeLocal DNSCache forwards the zones", "no server block", direct)
		cm.Data["Corefile"] += "global:53 {\n    bind 169.254.20.10\n    forward . 10.96.0.53\n}\n"
		_, err = cp.Client.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{})
		must(t, err)
		if failed, code, _ := runCheck(t, cp, direct); code != 0 {
			t.Errorf("with the stub: exit %d, %v", code, failed)
		}
	})

	t.Run("Link without locality", func(t *testing.T) {
		must(t, harness.ApplyLink(ctx, dyn, "linkerd-multicluster", "north", nil))
		wantFailure(t, cp, "every Linkerd Link's cluster has a name and a locality", "cluster north has no locality", direct)
		must(t, dyn.Resource(harness.LinkResource).Namespace("linkerd-multicluster").Delete(ctx, "north", metav1.DeleteOptions{}))
	})

	t.Run("RBAC missing a verb", func(t *testing.T) {
		restore := dropVerb(t, cp, "coredns-global-read", "endpointslices", "watch")
		wantFailure(t, cp, "RBAC grants what the Corefile's options need", "watch endpointslices.discovery.k8s.io (all namespaces)", direct)
		restore()
	})

	t.Run("Links unreadable", func(t *testing.T) {
		restore := dropVerb(t, cp, "coredns-global-read", "links", "list")
		wantFailure(t, cp, "RBAC grants reading Linkerd's Links", "list links.multicluster.linkerd.io in linkerd-multicluster", direct)
		restore()
	})

	// The contract's access of client_locality pod: the chart grants the Pods read with it; with
	// the Corefile's option set and the rule dropped, check names what is missing.
	t.Run("Pods unreadable under client_locality pod", func(t *testing.T) {
		const desc = "RBAC grants what the Corefile's options need"
		cms, roles := cp.Client.CoreV1().ConfigMaps(ns), cp.Client.RbacV1().ClusterRoles()
		cm, err := cms.Get(ctx, "coredns-global", metav1.GetOptions{})
		must(t, err)
		corefile := cm.Data["Corefile"]
		cm.Data["Corefile"] = strings.Replace(corefile, "    global {\n", "    global {\n        client_locality pod\n", 1)
		if cm.Data["Corefile"] == corefile {
			t.Fatalf("no global block in the installed Corefile:\n%s", corefile)
		}
		cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		must(t, err)
		read, err := roles.Get(ctx, "coredns-global-read", metav1.GetOptions{})
		must(t, err)
		rules := read.Rules
		read.Rules = append(slices.Clone(rules), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}})
		_, err = roles.Update(ctx, read, metav1.UpdateOptions{})
		must(t, err)
		defer func() {
			cm.Data["Corefile"] = corefile
			_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
			must(t, err)
			read, err := roles.Get(ctx, "coredns-global-read", metav1.GetOptions{})
			must(t, err)
			read.Rules = rules
			_, err = roles.Update(ctx, read, metav1.UpdateOptions{})
			must(t, err)
		}()
		eventually(t, "the RBAC check to pass with the Pods read", func() error {
			if failed, _, _ := runCheck(t, cp, direct); failed[desc] != "" {
				return fmt.Errorf("%s: %s", desc, failed[desc])
			}
			return nil
		})
		restore := dropVerb(t, cp, "coredns-global-read", "pods", "list")
		defer restore()
		wantFailure(t, cp, desc, "list pods (all namespaces)", direct)
	})

	t.Run("no mirror policy", func(t *testing.T) {
		const desc = "an admission policy guards Linkerd's mirror labels"
		must(t, cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, "linkerd-mirrors", metav1.DeleteOptions{}))
		failed, code, _ := runCheck(t, cp, direct)
		if code != 0 || !strings.HasPrefix(failed[desc], "warning: ") || !strings.Contains(failed[desc], "linkerd.mirrorPolicy") {
			t.Errorf("without the mirror policy: exit %d, failed %v", code, failed)
		}
		harness.RunKubectl(t, cp, manifests, "apply", "-f", "-")
		if failed, code, _ := runCheck(t, cp, direct); code != 0 || failed[desc] != "" {
			t.Errorf("with the mirror policy again: exit %d, failed %v", code, failed)
		}
	})

	t.Run("no replica synced", func(t *testing.T) {
		cut := harness.StartProxy(t, cp.APIServerAddr())
		cut.Cut()
		kubeconfig, err := cp.KubeconfigVia(cut, "")
		must(t, err)
		unsynced := harness.StartCoreDNS(t, nil, "global:{{.Port}} {\n    global {\n        kubeconfig "+kubeconfig+"\n        endpointslices off\n        startup_timeout 1s\n    }\n}\n")
		createReplicaPod(t, cp, ns, "coredns-global-unsynced", unsynced)
		wantFailure(t, cp, "every replica reports synced", "coredns-global-unsynced has not synced", direct)
		must(t, cp.Client.CoreV1().Pods(ns).Delete(ctx, "coredns-global-unsynced", metav1.DeleteOptions{}))
	})

	t.Run("no leader", func(t *testing.T) {
		proxy.Cut() // the replicas keep answering from what they have; the leader cannot renew
		wantFailure(t, cp, "a leader holds the writer Lease and renews it", "renewed it", direct)
		if failed, _, _ := runCheck(t, cp, direct); len(failed) != 1 {
			t.Errorf("the replicas cut off from the API server fail %v, want the leader's check alone", failed)
		}
		proxy.Restore()
	})

	// Every example of every command, as printed; uninstall's in the next subtest.
	t.Run("examples", func(t *testing.T) {
		examples := cliExamples(t)
		for _, cmd := range slices.Sorted(maps.Keys(examples)) {
			if cmd == "uninstall" {
				continue
			}
			for _, ex := range examples[cmd] {
				out, ok := runExample(t, cp, ex)
				if !ok {
					t.Errorf("%s:\n%s", ex, out)
				}
			}
		}
	})

	t.Run("uninstall", func(t *testing.T) {
		// A Helm release's ClusterRole in the same cluster: not this CLI's to list.
		_, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "helm-coredns-global-read",
			Labels: map[string]string{"app.kubernetes.io/part-of": "coredns-global", "app.kubernetes.io/managed-by": "Helm"}}}, metav1.CreateOptions{})
		must(t, err)
		examples := cliExamples(t)["uninstall"]
		if len(examples) != 1 || !strings.HasPrefix(examples[0], "linkerd global uninstall | ") {
			t.Fatalf("uninstall's examples: %q", examples)
		}
		out, stderr, code := cli(t, cp, "", "uninstall")
		if code != 0 {
			t.Fatalf("uninstall: %s", stderr)
		}
		var want, got []string
		for k, u := range objectsOf(t, manifests) {
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
	})
}

// startReplicasVia starts n bin/coredns processes as the release's pods, reaching the API server
// through p: its ConfigMap's Corefile, its Deployment's environment, its ServiceAccount's token.
func startReplicasVia(t *testing.T, cp *harness.ControlPlane, p *harness.Proxy, ns, name string, n int) []*harness.CoreDNS {
	t.Helper()
	ctx := context.Background()
	tr, err := cp.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](3600)}}, metav1.CreateOptions{})
	must(t, err)
	kubeconfig, err := cp.KubeconfigVia(p, tr.Status.Token)
	must(t, err)
	cm, err := cp.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	d, err := cp.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	env := podEnv(ns, kubeconfig, d.Spec.Template.Spec.Containers[0])
	var out []*harness.CoreDNS
	for range n {
		out = append(out, harness.StartCoreDNS(t, nil, localize(cm.Data["Corefile"], repoPath(t)), harness.WithEnv(env...)))
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
	must(t, err)
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
	must(t, err)
	harness.SetPodStatus(pod, harness.Pod{IP: ip, Ready: true})
	_, err = cp.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	must(t, err)
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	must(t, err)
	n, err := strconv.Atoi(p)
	must(t, err)
	return n
}

// setDeploymentAvailable reports n replicas of the Deployment up to date and available, as its
// controller would (kubernetes pkg/controller/deployment/sync.go calculateStatus).
func setDeploymentAvailable(t *testing.T, cp *harness.ControlPlane, ns, name string, n int32) {
	t.Helper()
	ctx := context.Background()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
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
	must(t, err)
	port := int32(portOf(t, c.Addr))
	// On a Node: the EndpointSlice controller leaves out pods on none.
	must(t, harness.CreateNode(context.Background(), cp.Client, harness.Node{Name: "dns-node", Zone: "us-east-1a", Region: "us-east-1"}))
	createRunningPod(t, cp, "kube-system", "coredns-0", ip, labels, corev1.PodSpec{NodeName: "dns-node", Containers: []corev1.Container{{Name: "coredns", Image: "coredns",
		Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: port, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: port, Protocol: corev1.ProtocolTCP}}}}})
}

// dropVerb removes verb from the rules of ClusterRole role on resource, and returns what puts it back.
func dropVerb(t *testing.T, cp *harness.ControlPlane, role, resource, verb string) func() {
	t.Helper()
	ctx := context.Background()
	cr, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	must(t, err)
	before := cr.DeepCopy()
	for i, r := range cr.Rules {
		if slices.Contains(r.Resources, resource) {
			cr.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == verb })
		}
	}
	_, err = cp.Client.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{})
	must(t, err)
	return func() {
		t.Helper()
		cur, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
		must(t, err)
		cur.Rules = before.Rules
		_, err = cp.Client.RbacV1().ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
		must(t, err)
	}
}

// TestCLIInstall: the install guide's command renders what the API server accepts (a server-side
// dry run), with no image value: the CLI runs the image of its own build, the one `make image`
// named. Installing another build over it changes the Deployment's pod template, so it rolls.
func TestCLIInstall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	must(t, harness.EnsureNamespace(ctx, client(), "coredns-global"))
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
	must(t, err)
	harness.RunKubectl(t, own, out, "apply", "-f", "-")
	after, err := own.Client.AppsV1().Deployments("coredns-global").Get(ctx, "coredns-global", metav1.GetOptions{})
	must(t, err)
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
	must(t, err)
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
