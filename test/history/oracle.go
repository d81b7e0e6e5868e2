package history

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The oracle: what every replica must answer and what the writer must have written, computed
// from the API's current objects alone, by the rules of the plugin's README (Description,
// Names), docs/design.md (Linked cluster liveness) and docs/endpointslices.md, as plainly as they
// can be written. It shares no code with index/ or writer/ on purpose: a bug there must not be
// copied here.

// record is one member endpoint.
type record struct {
	cluster, host, addr string
	node, zone          string // a local pod's node and its slice's zone; a mirror's cluster's zone
	ready               bool
	ports               map[string]int32 // named port -> the port an SRV record gives
}

// zones are the zones of the history's clusters (corefile's localities), and
// nodes this cluster's Nodes: name -> zone. A client on a node ranks a record 0 when it
// runs there, 1 when in its zone, 2 when in this cluster, 3 when in its region, 4 otherwise.
var (
	zones = map[string]string{"west": "us-east-1b", "north": "eu-north-1a"}
	nodes = map[string]string{"east-a": "us-east-1a", "east-b": "us-east-1b"}
)

// clientTier is r's tier as seen from a client on node.
func (r record) clientTier(node string) int {
	switch {
	case r.cluster == "east" && r.node == node:
		return 0
	case r.zone != "" && r.zone == nodes[node]:
		return 1
	case r.cluster == "east":
		return 2
	case r.cluster == "west": // us-east-1, as every node
		return 3
	}
	return 4
}

// service is a global service: <svc> in <ns> with at least one member.
type service struct {
	ns, svc string
	records []record
}

func (s *service) name() string { return s.svc + "." + s.ns + ".global." }

func (s *service) ready() []record {
	var out []record
	for _, r := range s.records {
		if r.ready {
			out = append(out, r)
		}
	}
	return out
}

// oracle computes the global services of namespaces from the API: its Services and slices, and
// its Links (dyn nil: none served), whose clusters' mirrors are the only ones that are members.
func oracle(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, namespaces []string) (map[string]*service, error) {
	linked, err := linkedClusters(ctx, dyn)
	if err != nil {
		return nil, err
	}
	out := map[string]*service{}
	for _, ns := range namespaces {
		svcs, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		sls, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		slicesOf := map[string][]discoveryv1.EndpointSlice{}
		for _, s := range sls.Items {
			name := s.Labels[discoveryv1.LabelServiceName]
			slicesOf[name] = append(slicesOf[name], s)
		}
		podMirrorReady := podMirrorsReady(svcs.Items, slicesOf)
		for _, s := range svcs.Items {
			name, cluster := memberOf(s, linked)
			if name == "" {
				continue
			}
			key := ns + "/" + name
			if out[key] == nil {
				out[key] = &service{ns: ns, svc: name}
			}
			for _, sl := range slicesOf[s.Name] {
				out[key].records = append(out[key].records, sliceRecords(s, sl, cluster, podMirrorReady)...)
			}
		}
	}
	return out, nil
}

// podMirrorsReady are the per-pod mirrors by address: each is ready while its slices have a
// ready endpoint (the gateway alive).
func podMirrorsReady(svcs []corev1.Service, slicesOf map[string][]discoveryv1.EndpointSlice) map[string]bool {
	out := map[string]bool{}
	for _, s := range svcs {
		if s.Labels[harness.LabelHeadlessMirrorSvcName] != "" && s.Spec.ClusterIP != corev1.ClusterIPNone {
			ready := false
			for _, sl := range slicesOf[s.Name] {
				for _, e := range sl.Endpoints {
					ready = ready || isReady(e)
				}
			}
			out[s.Spec.ClusterIP] = ready
		}
	}
	return out
}

// memberOf is the global service Service s is a member of, and its cluster; "" when none: s is
// neither an exported local headless Service nor the headless mirror of a linked cluster.
func memberOf(s corev1.Service, linked map[string]bool) (name, cluster string) {
	if s.Spec.ClusterIP != corev1.ClusterIPNone || s.DeletionTimestamp != nil {
		return "", ""
	}
	switch {
	case s.Labels[harness.LabelMirroredService] == "true" && s.Labels[harness.LabelClusterName] != "":
		if s.Labels[harness.LabelHeadlessMirrorSvcName] != "" {
			return "", ""
		}
		if cluster = s.Labels[harness.LabelClusterName]; linked != nil && !linked[cluster] {
			return "", "" // no Link names its cluster: not a member
		}
		name, _, _ = strings.Cut(s.Annotations[harness.AnnotationRemoteSvcFqName], ".")
		if name == "" {
			name = strings.TrimSuffix(s.Name, "-"+cluster)
		}
		return name, cluster
	case s.Labels[harness.LabelExported] == "true":
		return s.Name, "east"
	}
	return "", ""
}

// linkedClusters returns the clusters Linkerd's Links name in Linkerd's namespace, nil without dyn.
func linkedClusters(ctx context.Context, dyn dynamic.Interface) (map[string]bool, error) {
	if dyn == nil {
		return nil, nil
	}
	links, err := dyn.Resource(harness.LinkResource).Namespace(harness.LinkerdNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range links.Items {
		cluster, _, _ := unstructured.NestedString(l.Object, "spec", "targetClusterName")
		out[cluster] = true
	}
	return out, nil
}

// sliceRecords are the records of one member slice.
func sliceRecords(svc corev1.Service, sl discoveryv1.EndpointSlice, cluster string, podMirrorReady map[string]bool) []record {
	local := cluster == "east"
	ports := map[string]int32{}
	for _, p := range sl.Ports {
		if p.Name == nil || *p.Name == "" || p.Port == nil {
			continue
		}
		if local {
			ports[*p.Name] = *p.Port
			continue
		}
		for _, sp := range svc.Spec.Ports { // a mirror's SRV port is its Service's, by name
			if sp.Name == *p.Name {
				ports[*p.Name] = sp.Port
			}
		}
	}
	var out []record
	for _, e := range sl.Endpoints {
		if len(e.Addresses) == 0 || e.Conditions.Terminating != nil && *e.Conditions.Terminating {
			continue
		}
		addr, err := netip.ParseAddr(e.Addresses[0])
		if err != nil {
			continue
		}
		r := record{cluster: cluster, addr: addr.String(), ready: isReady(e), ports: ports, zone: zones[cluster]}
		if local {
			r.node, r.zone = ptr.Deref(e.NodeName, ""), ptr.Deref(e.Zone, "")
		}
		switch {
		case e.Hostname != nil && *e.Hostname != "":
			r.host = *e.Hostname
		case !local:
			continue // the gateway's address of an edited remote Service: not a peer
		default:
			r.host = strings.NewReplacer(".", "-", ":", "-").Replace(r.addr)
		}
		if ready, ok := podMirrorReady[r.addr]; ok && !local {
			r.ready = ready
		}
		out = append(out, r)
	}
	return out
}

func isReady(e discoveryv1.Endpoint) bool { return e.Conditions.Ready == nil || *e.Conditions.Ready }

// sortRecords orders records for printing.
func sortRecords(rs []record) []record {
	return slices.SortedFunc(slices.Values(rs), func(a, b record) int {
		return cmp.Or(cmp.Compare(a.cluster, b.cluster), netip.MustParseAddr(a.addr).Compare(netip.MustParseAddr(b.addr)))
	})
}

// nodeAddrs are the history's Nodes' addresses, which clients on them send from: loopback ones,
// the same in every control plane of the test binary (each history's replicas read the Nodes of
// their own, so histories on control planes of their own run side by side).
var nodeAddrs = sync.OnceValue(func() map[string]string {
	base := fmt.Sprintf("127.63.%d.", 1+rand.IntN(250))
	addrs := map[string]string{}
	for i, name := range slices.Sorted(maps.Keys(nodes)) {
		addrs[name] = base + strconv.Itoa(2+i)
	}
	return addrs
})

// CreateNodes creates this cluster's Nodes, east-a and east-b, with loopback addresses.
func CreateNodes(t *testing.T, c kubernetes.Interface) {
	for name, addr := range nodeAddrs() {
		testkit.Must(t, harness.CreateNode(context.Background(), c, harness.Node{Name: name, Zone: nodes[name], Region: "us-east-1",
			Addresses: []string{addr}}))
	}
}
