package history

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// checkWritten compares the written Services and slices of namespaces with the oracle's: one
// <svc>-global Service per global service and, in its slices, every record (ready or not) of
// every member, by cluster, address and readiness; nothing else of ours.
func checkWritten(ctx context.Context, c kubernetes.Interface, namespaces []string, want map[string]*service) error {
	ours := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=coredns-global"}
	for _, ns := range namespaces {
		svcs, err := c.CoreV1().Services(ns).List(ctx, ours)
		if err != nil {
			return err
		}
		var gotSvcs, wantSvcs []string
		for _, s := range svcs.Items {
			gotSvcs = append(gotSvcs, s.Name)
		}
		got := map[string][]string{}
		wanted := map[string][]string{}
		for _, s := range want {
			if s.ns != ns {
				continue
			}
			wantSvcs = append(wantSvcs, s.svc+"-global")
			for _, r := range s.records {
				wanted[s.svc+"-global"] = append(wanted[s.svc+"-global"], fmt.Sprintf("%s %s ready=%t", r.cluster, r.addr, r.ready))
			}
		}
		slices.Sort(gotSvcs)
		slices.Sort(wantSvcs)
		if !slices.Equal(gotSvcs, wantSvcs) {
			return fmt.Errorf("written Services in %s: %v, want %v", ns, gotSvcs, wantSvcs)
		}
		sls, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, ours)
		if err != nil {
			return err
		}
		for _, sl := range sls.Items {
			svc := sl.Labels[discoveryv1.LabelServiceName]
			for _, e := range sl.Endpoints {
				addr, _ := netip.ParseAddr(e.Addresses[0])
				got[svc] = append(got[svc], fmt.Sprintf("%s %s ready=%t", sl.Labels["globaldns.io/source-cluster"], addr, isReady(e)))
			}
		}
		for _, svc := range slices.Sorted(maps.Keys(joinKeys(got, wanted))) {
			g, w := slices.Sorted(slices.Values(got[svc])), slices.Sorted(slices.Values(wanted[svc]))
			if !slices.Equal(g, w) {
				return fmt.Errorf("written slices of %s/%s: %v, want %v", ns, svc, g, w)
			}
		}
	}
	return nil
}

func joinKeys(a, b map[string][]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// checkNothingForeign reports an object of namespaces, not ours, that a coredns process wrote
// (its managedFields name every writer: the plugin writes as "coredns").
func checkNothingForeign(ctx context.Context, c kubernetes.Interface, namespaces []string) error {
	for _, ns := range namespaces {
		svcs, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		sls, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		eps, err := c.CoreV1().Endpoints(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var objs []metav1.Object
		for i := range svcs.Items {
			objs = append(objs, &svcs.Items[i])
		}
		for i := range sls.Items {
			objs = append(objs, &sls.Items[i])
		}
		for i := range eps.Items {
			objs = append(objs, &eps.Items[i])
		}
		for _, o := range objs {
			if o.GetLabels()["app.kubernetes.io/managed-by"] == "coredns-global" {
				continue
			}
			for _, f := range o.GetManagedFields() {
				if strings.HasPrefix(f.Manager, "coredns") {
					return fmt.Errorf("%s/%s, not ours, was written by %s (%s)", ns, o.GetName(), f.Manager, f.Operation)
				}
			}
		}
	}
	return nil
}
