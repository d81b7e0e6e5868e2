package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUninstallSideBySide: a CLI release (coredns-global) and a Helm release (coredns-global-helm,
// in a namespace labelled as install.md has Helm users label theirs) in one cluster, each writing
// in a namespace of its own. Uninstalling either, as docs/install.md says, removes its objects and,
// with its owner ClusterRole, what its writer wrote; the other's objects, written ones included,
// stay as they were, and it goes on writing.
func TestUninstallSideBySide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	own := harness.Start(t) // of its own: the releases' cluster-scoped objects
	admin := own.Client
	meshIn(t, admin, "db", mirror("db", "west", true, true))
	meshIn(t, admin, "db2", mirror("db2", "west", true, true))

	manifests, stderr, code := cli(t, nil, "", "install", "--set", "clusterName=east,namespaces={db},image.repository="+imageRepository)
	if code != 0 {
		t.Fatalf("install: %s", stderr)
	}
	harness.RunKubectl(t, own, manifests, "apply", "-f", "-")
	cliPods := startRelease(t, own, "coredns-global", "coredns-global", 1)

	const helmNS, helmRelease = "helm-global", "coredns-global-helm"
	testkit.Must(t, harness.EnsureNamespace(ctx, admin, helmNS))
	harness.RunKubectl(t, own, "", "label", "namespace", helmNS, "linkerd.io/extension=global")
	harness.RunHelm(t, helms(t)["helm4"], own, "install", helmRelease, chartPath(t, ""), "--namespace", helmNS,
		"--set", "clusterName=east,namespaces={db2},image.repository="+imageRepository+",image.tag="+strings.TrimPrefix(thisBuild(t).image, imageRepository+":"))
	helmPods := startRelease(t, own, helmNS, helmRelease, 1)
	for _, ns := range []string{"db", "db2"} {
		harness.Eventually(t, "the slices written in "+ns, func() error { return writtenSlices(t, admin, ns, map[string]int{"east": 3, "west": 2}) })
	}

	// The CLI's uninstall lists nothing of the Helm release's, and removes what it wrote.
	helmObjects, helmWritten := releaseVersions(ctx, t, own, helmNS, helmRelease), writtenIn(t, own, "db2")
	out, stderr, code := cli(t, own, "", "uninstall")
	if code != 0 || strings.Contains(out, helmNS) || strings.Contains(out, helmRelease) {
		t.Errorf("uninstall (exit %d) lists the Helm release's objects:\n%s%s", code, out, stderr)
	}
	if out, ok := runExample(t, own, cliExamples(t)["uninstall"][0]); !ok {
		t.Fatalf("uninstall:\n%s", out)
	}
	stopAll(cliPods...)
	writtenGone(t, own, "db")
	if got := releaseVersions(ctx, t, own, helmNS, helmRelease); !maps.Equal(got, helmObjects) {
		t.Errorf("after the CLI's uninstall, the Helm release's objects %v, were %v", got, helmObjects)
	}
	if got := writtenIn(t, own, "db2"); !maps.Equal(got, helmWritten) {
		t.Errorf("after the CLI's uninstall, the Helm release's written objects %v, were %v", got, helmWritten)
	}

	// The Helm release's writer writes on; then helm uninstall removes what it wrote.
	testkit.Must(t, harness.DeletePod(ctx, admin, "db2", "foo-2")) // as a kubelet confirms it
	harness.Eventually(t, "the Helm release writing", func() error { return writtenSlices(t, admin, "db2", map[string]int{"east": 2, "west": 2}) })
	harness.RunHelm(t, helms(t)["helm4"], own, "uninstall", helmRelease, "--namespace", helmNS)
	stopAll(helmPods...)
	writtenGone(t, own, "db2")
	if _, err := admin.CoreV1().Namespaces().Get(ctx, helmNS, metav1.GetOptions{}); err != nil {
		t.Errorf("the Helm release's namespace: %v", err)
	}
}

// releaseVersions are the resourceVersions of the objects of Helm release name in namespace ns and
// its cluster-scoped ones, by kind and name.
func releaseVersions(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name}
	roles, err := cp.Client.RbacV1().ClusterRoles().List(ctx, sel)
	testkit.Must(t, err)
	for _, o := range roles.Items {
		out["ClusterRole/"+o.Name] = o.ResourceVersion
	}
	deps, err := cp.Client.AppsV1().Deployments(ns).List(ctx, sel)
	testkit.Must(t, err)
	for _, o := range deps.Items {
		out["Deployment/"+o.Name] = o.ResourceVersion
	}
	cms, err := cp.Client.CoreV1().ConfigMaps(ns).List(ctx, sel)
	testkit.Must(t, err)
	for _, o := range cms.Items {
		out["ConfigMap/"+o.Name] = o.ResourceVersion
	}
	if len(out) < 3 {
		t.Fatalf("release %s: only %v", name, out)
	}
	return out
}

// writtenGone waits for the garbage collector to delete what a writer wrote in namespace ns.
func writtenGone(t *testing.T, cp *harness.ControlPlane, ns string) {
	t.Helper()
	harness.EventuallyLong(t, "the objects written in "+ns+" gone", func() error {
		if _, err := cp.Client.CoreV1().Services(ns).Get(context.Background(), "foo-global", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("foo-global: %v", err)
		}
		if left := writtenIn(t, cp, ns); len(left) > 0 {
			return fmt.Errorf("left %v", left)
		}
		return nil
	})
}
