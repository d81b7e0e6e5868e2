package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// TestWriterMeshConfig: the written objects carry what Linkerd's destination service reads beside
// endpoints, from where Linkerd puts it, follow it as it changes, and carry nothing else: the
// -global Service the opaque ports of the local exported Service (or, with none, of the remote one,
// which Linkerd copies onto its mirror), a linked cluster's slices its mirror's gateway identity
// and remote name, this cluster's slices none, and no slice Linkerd's cluster-name label (the
// destination would tag every address of the Service with one linked cluster's name).
func TestWriterMeshConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	const opaque, foreign = "config.linkerd.io/opaque-ports", "example.com/team"
	annotateService(t, ns, "foo", map[string]string{opaque: "5432", foreign: "db"})
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	// north's Link has no gateway identity: Linkerd writes none, and neither does the writer.
	north := mirror(ns, "north", true)
	north.GatewayIdentity = "-"
	_, err = harness.CreateMirror(ctx, client(), north)
	testkit.Must(t, err)
	// bar has no local Service here: its mirror carries the remote Service's annotations.
	bar := mirrorOf(ns, "bar", "west", true)
	bar.Annotations = map[string]string{opaque: "6379", foreign: "cache"}
	_, err = harness.CreateMirror(ctx, client(), bar)
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))

	identity := map[string]string{"west": harness.GatewayIdentity}
	ports := map[string]string{"foo": "5432", "bar": "6379"}
	harness.Eventually(t, "the mesh configuration written", func() error { return meshWritten(ns, ports, identity) })
	harness.Eventually(t, "north's slice reported once", func() error {
		if n := strings.Count(c.Logs(), "no mirror.linkerd.io/remote-gateway-identity annotation"); n != 1 {
			return fmt.Errorf("%d log lines:\n%s", n, c.Logs())
		}
		if v := c.Metric(t, `coredns_global_skipped_total{reason="mirror_without_gateway_identity"}`); v != "1" {
			return fmt.Errorf("skipped_total %q", v)
		}
		return nil
	})

	// The owner changes the opaque ports, then removes them; the foreign annotation never goes.
	annotateService(t, ns, "foo", map[string]string{opaque: "5432,8080"})
	ports["foo"] = "5432,8080"
	harness.Eventually(t, "the opaque ports changed", func() error { return meshWritten(ns, ports, identity) })
	annotateService(t, ns, "foo", map[string]string{opaque: ""})
	delete(ports, "foo")
	harness.Eventually(t, "the opaque ports removed", func() error { return meshWritten(ns, ports, identity) })

	// west is linked again with another gateway identity (linkerd multicluster unlink, then link:
	// its mirrors are made anew, annotated with the new Link's identity).
	identity["west"] = "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.west.example"
	for _, m := range []harness.Mirror{mirror(ns, "west", true), bar} {
		testkit.Must(t, harness.DeleteMirror(ctx, client(), ns, m.Service, "west"))
		m.GatewayIdentity = identity["west"]
		_, err = harness.CreateMirror(ctx, client(), m)
		testkit.Must(t, err)
	}
	harness.Eventually(t, "west's new gateway identity", func() error { return meshWritten(ns, ports, identity) })
}

// meshWritten checks the written foo-global and bar-global: each Service's opaque ports as ports
// says (none when absent) and no other annotation of the members', each linked cluster's slices
// the remote name and the gateway identity as identity says (none when absent), this cluster's
// slices neither, no slice Linkerd's cluster-name label.
func meshWritten(ns string, ports, identity map[string]string) error {
	ctx := context.Background()
	for _, svc := range []string{"foo", "bar"} {
		s, err := client().CoreV1().Services(ns).Get(ctx, svc+"-global", metav1.GetOptions{})
		if err != nil {
			return err
		}
		var want map[string]string
		if p, ok := ports[svc]; ok {
			want = map[string]string{"config.linkerd.io/opaque-ports": p}
		}
		if !maps.Equal(s.Annotations, want) {
			return fmt.Errorf("Service %s-global annotations %v, want %v", svc, s.Annotations, want)
		}
		list, err := client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "-global"})
		if err != nil {
			return err
		}
		for _, es := range list.Items {
			cluster := es.Labels["globaldns.io/source-cluster"]
			var want map[string]string
			if cluster != "east" {
				want = map[string]string{harness.AnnotationRemoteSvcFqName: svc + "." + ns + ".svc.cluster.local"}
				if id, ok := identity[cluster]; ok {
					want[harness.AnnotationRemoteGatewayIdentity] = id
				}
			}
			if l, ok := es.Labels[harness.LabelClusterName]; ok {
				return fmt.Errorf("%s: label %s=%q", es.Name, harness.LabelClusterName, l)
			}
			if !maps.Equal(es.Annotations, want) {
				return fmt.Errorf("%s annotations %v, want %v", es.Name, es.Annotations, want)
			}
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no slices of %s-global", svc)
		}
	}
	return nil
}

// annotateService sets the annotations set on Service name of ns, deleting those set to "".
func annotateService(t *testing.T, ns, name string, set map[string]string) {
	t.Helper()
	ctx := context.Background()
	testkit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if svc.Annotations == nil {
			svc.Annotations = map[string]string{}
		}
		for k, v := range set {
			if v == "" {
				delete(svc.Annotations, k)
			} else {
				svc.Annotations[k] = v
			}
		}
		_, err = client().CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
		return err
	}))
}
