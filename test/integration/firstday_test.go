package integration

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// TestFirstDay follows docs/install.md as a new user would, its commands as written, on a control
// plane of its own: the image `make image` names is the one the install command runs (loading it
// into a kubelet cannot happen here: there is no container runtime); `helm install` (one replica,
// clusterName east), the release's replicas answering and writing as its ServiceAccount with its
// Corefile; `helm upgrade` to values-ha.yaml, three replicas; `helm uninstall`, after which the
// garbage collector leaves nothing the writer wrote, and nothing else is touched. Then the same
// with kustomize: `kubectl apply -k`, the ClusterProperty naming the cluster, `kubectl delete -k`.
func TestFirstDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	own := harness.Start(t) // of its own: the releases' cluster-scoped objects
	admin := own.Client
	helm := helms(t)["helm4"]
	const doc = "docs/install.md"

	// The image: what `make image` names (its default IMAGE) is what the install command runs.
	if !slices.Contains(docCommand(t, doc, "make build image"), "image") {
		t.Fatalf("%s has no `make image`", doc)
	}
	tarball, err := harness.Built(harness.EnvImageTar, "image")
	testkit.Must(t, err)
	install := docCommand(t, doc, "helm install coredns-global ")
	template := append([]string{"template"}, install[1:]...)
	rendered := harness.RunHelm(t, helm, nil, append(template, "--kube-version", strings.TrimPrefix(kubernetesVersion(t), "v"))...)
	ctr := as[appsv1.Deployment](t, objectsOf(t, rendered)["Deployment/coredns-global"]).Spec.Template.Spec.Containers[0]
	if ref := imageName(t, tarball); ctr.Image != ref || ctr.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("the install command runs %s (%s); make image built %s", ctr.Image, ctr.ImagePullPolicy, ref)
	}

	// The mesh: this cluster's exported StatefulSet foo (two pods ready, one not), and west's, mirrored.
	const ns = "db"
	meshIn(t, admin, ns, mirror(ns, "west", true, true))
	foreign := foreignVersions(ctx, t, own, ns)

	// Install: the namespace, Pod Security restricted (TestPodSecurityRestricted), then one replica.
	docNamespace(t, own, doc)
	harness.RunHelm(t, helm, own, install...)
	replicas := startRelease(t, own, "coredns-global", "coredns-global", 1)
	harness.Eventually(t, "the answers of the installed release", func() error { return answers(t, replicas[0], "foo.db.global.", 4) })
	harness.Eventually(t, "the written slices", func() error { return writtenSlices(t, admin, ns, map[string]int{"east": 3, "west": 2}) })
	role, err := admin.RbacV1().ClusterRoles().Get(ctx, "coredns-global-write", metav1.GetOptions{})
	testkit.Must(t, err)
	written, err := admin.CoreV1().Services(ns).Get(ctx, "foo-global", metav1.GetOptions{})
	testkit.Must(t, err)
	if o := written.OwnerReferences; len(o) != 1 || o[0].Kind != "ClusterRole" || o[0].Name != role.Name || o[0].UID != role.UID || o[0].Controller != nil {
		t.Errorf("foo-global's owners %+v, want ClusterRole %s (%s)", o, role.Name, role.UID)
	}

	// Upgrade to three replicas: the rollout a kubelet would do, one replica after another.
	harness.RunHelm(t, helm, own, docCommand(t, doc, "helm upgrade coredns-global deploy/chart --namespace coredns-global --reset-then-reuse-values --values ")...)
	d, err := admin.AppsV1().Deployments("coredns-global").Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	if ru := d.Spec.Strategy.RollingUpdate; *d.Spec.Replicas != 3 || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable.IntValue() != 1 ||
		!slices.Contains(d.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "CLUSTER_NAME", Value: "east"}) {
		t.Errorf("upgraded: replicas %d, strategy %+v, env %+v", *d.Spec.Replicas, d.Spec.Strategy, d.Spec.Template.Spec.Containers[0].Env)
	}
	stopAll(replicas...)
	replicas = startRelease(t, own, "coredns-global", "coredns-global", 3)
	for _, c := range replicas {
		harness.Eventually(t, "the answers of the upgraded release", func() error { return answers(t, c, "foo.db.global.", 4) })
	}
	waitLeader(t, replicas...)

	// Uninstall: the writer's objects go with the release; nothing else does.
	harness.RunHelm(t, helm, own, docCommand(t, doc, "helm uninstall coredns-global ")...)
	stopAll(replicas...) // the kubelet stops the pods
	leftNothing(t, own, doc)
	if got := foreignVersions(ctx, t, own, ns); !maps.Equal(got, foreign) {
		t.Errorf("objects not ours changed: %v, were %v", got, foreign)
	}

	// kustomize: the cluster named by its ClusterProperty, as install.md says for deploy/base.
	nameCluster(t, own, "east", "west")
	harness.RunKubectl(t, own, "", docCommand(t, doc, "kubectl apply -k ")...)
	replicas = startRelease(t, own, "coredns-global", "coredns-global", 2)
	for _, c := range replicas {
		harness.Eventually(t, "the answers of the kustomization", func() error { return answers(t, c, "foo.db.global.", 4) })
	}
	harness.Eventually(t, "the slices written under kustomize", func() error { return writtenSlices(t, admin, ns, map[string]int{"east": 3, "west": 2}) })
	harness.RunKubectl(t, own, "", docCommand(t, doc, "kubectl delete -k ")...)
	stopAll(replicas...)
	leftNothing(t, own, doc)
	if got := foreignVersions(ctx, t, own, ns); !maps.Equal(got, foreign) {
		t.Errorf("objects not ours changed: %v, were %v", got, foreign)
	}
}

// nameCluster names cp's cluster name with its ClusterProperty, and creates the Links of the linked
// clusters, as Linkerd has them: with the Link CRD installed (it comes with the ClusterProperty's
// here), the plugin answers only the mirrors a Link names.
func nameCluster(t *testing.T, cp *harness.ControlPlane, name string, linked ...string) {
	t.Helper()
	ctx := context.Background()
	testkit.Must(t, cp.InstallTopologyCRDs(ctx))
	dyn, err := dynamic.NewForConfig(cp.Config)
	testkit.Must(t, err)
	testkit.Must(t, harness.SetClusterProperty(ctx, dyn, name))
	testkit.Must(t, harness.EnsureNamespace(ctx, cp.Client, "linkerd-multicluster"))
	for _, cluster := range linked {
		testkit.Must(t, harness.ApplyLink(ctx, dyn, "linkerd-multicluster", cluster, nil))
	}
}

// stopAll stops cs at once, as a kubelet stops a Deployment's pods: each takes its lameduck.
func stopAll(cs ...*harness.CoreDNS) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(c.Stop)
	}
	wg.Wait()
}

// leftNothing waits until install.md's check finds nothing the writer wrote.
func leftNothing(t *testing.T, cp *harness.ControlPlane, doc string) {
	t.Helper()
	check := docCommand(t, doc, "kubectl get services,endpointslices ")
	harness.EventuallyLong(t, "nothing left by the writer", func() error {
		if out := harness.RunKubectl(t, cp, "", check...); strings.TrimSpace(out) != "" {
			return fmt.Errorf("left:\n%s", out)
		}
		return nil
	})
}

// foreignVersions are the resourceVersions of the objects the plugin reads and must never change:
// the local foo and Linkerd's mirrors.
func foreignVersions(ctx context.Context, t *testing.T, cp *harness.ControlPlane, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	svcs, err := cp.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by!=coredns-global"})
	testkit.Must(t, err)
	for _, s := range svcs.Items {
		out["Service/"+s.Name] = s.ResourceVersion
	}
	return out
}

// imageName is the name an OCI image layout tarball gives its image (index.json's ref.name, which
// kind load, ctr import and docker load tag it with).
func imageName(t *testing.T, tarball string) string {
	t.Helper()
	f, err := os.Open(tarball)
	testkit.Must(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s has no index.json", tarball)
		}
		testkit.Must(t, err)
		if h.Name != "index.json" {
			continue
		}
		var idx ociIndex
		testkit.Must(t, json.NewDecoder(tr).Decode(&idx))
		if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"] == "" {
			t.Fatalf("%s: index.json names no image: %+v", tarball, idx)
		}
		return idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	}
}

// TestClusterNameDefault: the chart's defaults name no cluster; the plugin takes the name from the
// ClusterProperty cluster.clusterset.k8s.io, and without one says "local", warns, and sets
// coredns_global_cluster_unnamed (the alert CoreDNSGlobalClusterUnnamed's) while mirrors exist.
// The installed release's Corefile, run as its ServiceAccount, on a control plane of its own: the
// ClusterProperty names the whole cluster.
func TestClusterNameDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	own := harness.Start(t)
	const ns = "db"
	meshIn(t, own.Client, ns, mirror(ns, "west", true))
	harness.RunHelm(t, helms(t)["helm4"], own, "install", "coredns-global", chartPath(t, ""), "--namespace", "coredns-global", "--create-namespace",
		"--set", "image.repository="+imageRepository)
	cm, err := own.Client.CoreV1().ConfigMaps("coredns-global").Get(ctx, "coredns-global", metav1.GetOptions{})
	testkit.Must(t, err)
	if c := cm.Data["Corefile"]; strings.Contains(c, "\n        cluster ") {
		t.Errorf("the default Corefile names the cluster:\n%s", c)
	}

	unnamed := startRelease(t, own, "coredns-global", "coredns-global", 1)[0]
	harness.Eventually(t, "the default name", func() error {
		if err := explains(t, unnamed, "global.", dns.RcodeSuccess, "cluster=local named-by=default"); err != nil {
			return err
		}
		if m := unnamed.Metric(t, "coredns_global_cluster_unnamed"); m != "1" {
			return fmt.Errorf("coredns_global_cluster_unnamed %q", m)
		}
		if !strings.Contains(unnamed.Logs(), "names no cluster") {
			return errors.New("no warning")
		}
		return nil
	})
	testkit.Must(t, expect(t, unnamed, "foo-0.local.foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10"))

	nameCluster(t, own, "east", "west")
	named := startRelease(t, own, "coredns-global", "coredns-global", 1)[0]
	harness.Eventually(t, "the ClusterProperty's name", func() error {
		if err := explains(t, named, "global.", dns.RcodeSuccess, "cluster=east named-by=clusterproperty"); err != nil {
			return err
		}
		if m := named.Metric(t, "coredns_global_cluster_unnamed"); m != "0" {
			return fmt.Errorf("coredns_global_cluster_unnamed %q", m)
		}
		return nil
	})
	testkit.Must(t, expect(t, named, "foo-0.east.foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10"))
}
