package integration

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
	"testing"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
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
// Names), docs/design.md (Linked cluster liveness) and docs/endpointslices.md, as plainly as they can be written. It shares
// no code with index/ or writer/ on purpose: a bug there must not be copied here.

// oracleRecord is one member endpoint.
type oracleRecord struct {
	cluster, host, addr string
	node, zone          string // a local pod's node and its slice's zone; a mirror's cluster's zone
	ready               bool
	ports               map[string]int32 // named port -> the port an SRV record gives
}

// historyZones are the zones of the history's clusters (historyCorefile's localities), and
// historyNodes this cluster's Nodes: name -> zone. A client on a node ranks a record 0 when it
// runs there, 1 when in its zone, 2 when in this cluster, 3 when in its region, 4 otherwise.
var (
	historyZones = map[string]string{"west": "us-east-1b", "north": "eu-north-1a"}
	historyNodes = map[string]string{"east-a": "us-east-1a", "east-b": "us-east-1b"}
)

// clientTier is r's tier as seen from a client on node.
func (r oracleRecord) clientTier(node string) int {
	switch {
	case r.cluster == "east" && r.node == node:
		return 0
	case r.zone != "" && r.zone == historyNodes[node]:
		return 1
	case r.cluster == "east":
		return 2
	case r.cluster == "west": // us-east-1, as every node
		return 3
	}
	return 4
}

// oracleService is a global service: <svc> in <ns> with at least one member.
type oracleService struct {
	ns, svc string
	records []oracleRecord
}

func (s *oracleService) name() string { return s.svc + "." + s.ns + ".global." }

func (s *oracleService) ready() []oracleRecord {
	var out []oracleRecord
	for _, r := range s.records {
		if r.ready {
			out = append(out, r)
		}
	}
	return out
}

// oracle computes the global services of namespaces from the API: its Services and slices, and
// its Links (dyn nil: none served), whose clusters' mirrors are the only ones that are members.
func oracle(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, namespaces []string) (map[string]*oracleService, error) {
	linked, err := historyLinks(ctx, dyn)
	if err != nil {
		return nil, err
	}
	out := map[string]*oracleService{}
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
		// A per-pod mirror is ready while its slices have a ready endpoint (the gateway alive).
		podMirrorReady := map[string]bool{}
		for _, s := range svcs.Items {
			if s.Labels[harness.LabelHeadlessMirrorSvcName] != "" && s.Spec.ClusterIP != corev1.ClusterIPNone {
				ready := false
				for _, sl := range slicesOf[s.Name] {
					for _, e := range sl.Endpoints {
						ready = ready || isReady(e)
					}
				}
				podMirrorReady[s.Spec.ClusterIP] = ready
			}
		}
		for _, s := range svcs.Items {
			if s.Spec.ClusterIP != corev1.ClusterIPNone || s.DeletionTimestamp != nil {
				continue
			}
			var name, cluster string
			switch {
			case s.Labels[harness.LabelMirroredService] == "true" && s.Labels[harness.LabelClusterName] != "":
				if s.Labels[harness.LabelHeadlessMirrorSvcName] != "" {
					continue
				}
				if cluster = s.Labels[harness.LabelClusterName]; linked != nil && !linked[cluster] {
					continue // no Link names its cluster: not a member
				}
				name, _, _ = strings.Cut(s.Annotations[harness.AnnotationRemoteSvcFqName], ".")
				if name == "" {
					name = strings.TrimSuffix(s.Name, "-"+cluster)
				}
			case s.Labels[harness.LabelExported] == "true":
				name, cluster = s.Name, "east"
			default:
				continue
			}
			key := ns + "/" + name
			if out[key] == nil {
				out[key] = &oracleService{ns: ns, svc: name}
			}
			for _, sl := range slicesOf[s.Name] {
				out[key].records = append(out[key].records, sliceRecords(s, sl, cluster, podMirrorReady)...)
			}
		}
	}
	return out, nil
}

// historyLinks returns the clusters Linkerd's Links name in Linkerd's namespace, nil without dyn.
func historyLinks(ctx context.Context, dyn dynamic.Interface) (map[string]bool, error) {
	if dyn == nil {
		return nil, nil
	}
	links, err := dyn.Resource(harness.LinkResource).Namespace(linkerdNamespace).List(ctx, metav1.ListOptions{})
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
func sliceRecords(svc corev1.Service, sl discoveryv1.EndpointSlice, cluster string, podMirrorReady map[string]bool) []oracleRecord {
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
	var out []oracleRecord
	for _, e := range sl.Endpoints {
		if len(e.Addresses) == 0 || e.Conditions.Terminating != nil && *e.Conditions.Terminating {
			continue
		}
		addr, err := netip.ParseAddr(e.Addresses[0])
		if err != nil {
			continue
		}
		r := oracleRecord{cluster: cluster, addr: addr.String(), ready: isReady(e), ports: ports, zone: historyZones[cluster]}
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

// checkAnswers compares a replica's answers with the oracle's: A, AAAA and SRV of every global
// service, of each cluster's name and of each pod's, NXDOMAIN for the names (in gone) of services
// without a ready record and of pods that are not ready, and the explanation's counts.
func checkAnswers(c *harness.CoreDNS, proto string, want map[string]*oracleService, gone []string) error {
	for _, key := range slices.Sorted(maps.Keys(want)) {
		s := want[key]
		ready := s.ready()
		if len(ready) == 0 {
			if err := expectRcode(c, proto, s.name(), dns.RcodeNameError); err != nil {
				return err
			}
			continue
		}
		// Each name below the service with the addresses it answers; SRV targets once per pod.
		names := map[string][]string{s.name(): nil}
		srv := map[string]bool{}
		for _, r := range ready {
			for _, name := range []string{s.name(), r.cluster + "." + s.name(), r.host + "." + r.cluster + "." + s.name()} {
				names[name] = append(names[name], r.addr)
			}
			for _, port := range r.ports {
				srv[fmt.Sprintf("%d %s.%s.%s", port, r.host, r.cluster, s.name())] = true
			}
		}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			var v4, v6 []string
			for _, a := range names[name] {
				if strings.Contains(a, ":") {
					v6 = append(v6, a)
				} else {
					v4 = append(v4, a)
				}
			}
			if err := cmp.Or(expectSet(c, proto, name, dns.TypeA, v4), expectSet(c, proto, name, dns.TypeAAAA, v6)); err != nil {
				return err
			}
		}
		for _, r := range s.records {
			if name := r.host + "." + r.cluster + "." + s.name(); names[name] == nil {
				if err := expectRcode(c, proto, name, dns.RcodeNameError); err != nil {
					return err
				}
			}
		}
		if err := expectSet(c, proto, s.name(), dns.TypeSRV, slices.Collect(maps.Keys(srv))); err != nil {
			return err
		}
		if err := checkZonesAndClients(c, proto, s, ready); err != nil {
			return err
		}
		counts := fmt.Sprintf("records=%d left-out=%d ", len(ready), len(s.records)-len(ready))
		if lines, _ := explainLines(c, s.name()); len(lines) == 0 || !strings.Contains(lines[0], counts) {
			return fmt.Errorf("dig CH TXT %s: %q, want %q", s.name(), lines, counts)
		}
	}
	for _, name := range gone {
		if s := want[name]; s == nil {
			ns, svc, _ := strings.Cut(name, "/")
			if err := expectRcode(c, proto, svc+"."+ns+".global.", dns.RcodeNameError); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkZonesAndClients compares a replica's zonal names of s and its answers to clients on each
// node with the oracle's: a pinned zone's IPv4 records; the SRV answer, whose priorities are the
// client's tiers; every ready IPv4 record in those tiers' order (within a tier, answers rotate).
func checkZonesAndClients(c *harness.CoreDNS, proto string, s *oracleService, ready []oracleRecord) error {
	for node, zone := range historyNodes {
		var pinned []string
		srv := map[string]bool{}
		for _, r := range ready {
			if r.zone == zone && !strings.Contains(r.addr, ":") {
				pinned = append(pinned, r.addr)
			}
			for _, port := range r.ports {
				srv[fmt.Sprintf("%d %d %s.%s.%s", r.clientTier(node), port, r.host, r.cluster, s.name())] = true
			}
		}
		if err := expectSet(c, proto, zone+".pin._zone."+s.name(), dns.TypeA, pinned); err != nil {
			return err
		}
		r, err := exchangeFrom(c, proto, nodeAddrs[node], s.name(), dns.TypeSRV)
		if err != nil {
			return err
		}
		var got []string
		for _, rr := range r.Answer {
			if rr, ok := rr.(*dns.SRV); ok {
				got = append(got, fmt.Sprintf("%d %d %s", rr.Priority, rr.Port, rr.Target))
			}
		}
		if slices.Sort(got); !slices.Equal(got, slices.Sorted(maps.Keys(srv))) {
			return fmt.Errorf("SRV %s from node %s over %s: %q, want %q", s.name(), node, proto, got, slices.Sorted(maps.Keys(srv)))
		}
		if r, err = exchangeFrom(c, proto, nodeAddrs[node], s.name(), dns.TypeA); err != nil {
			return err
		}
		tierOf := map[string]int{}
		for _, rec := range ready {
			tierOf[rec.addr] = rec.clientTier(node)
		}
		last, n := -1, 0
		for _, rr := range r.Answer {
			a, ok := rr.(*dns.A)
			tier, known := tierOf[a.A.String()]
			if !ok || !known || tier < last {
				return fmt.Errorf("A %s from node %s over %s: %v out of its tiers %v", s.name(), node, proto, render(r.Answer), tierOf)
			}
			last, n = tier, n+1
		}
		if want := len(slices.DeleteFunc(slices.Clone(ready), func(r oracleRecord) bool { return strings.Contains(r.addr, ":") })); n != want {
			return fmt.Errorf("A %s from node %s over %s: %d records, want %d", s.name(), node, proto, n, want)
		}
	}
	return nil
}

// nodeAddrs are the history's Nodes' addresses, which clients on them send from.
var nodeAddrs = map[string]string{}

// createHistoryNodes creates this cluster's Nodes, east-a and east-b, with loopback addresses.
func createHistoryNodes(t *testing.T, c kubernetes.Interface) {
	base := fmt.Sprintf("127.63.%d.", 1+rand.IntN(250))
	for i, name := range slices.Sorted(maps.Keys(historyNodes)) {
		nodeAddrs[name] = base + strconv.Itoa(2+i)
		must(t, harness.CreateNode(context.Background(), c, harness.Node{Name: name, Zone: historyNodes[name], Region: "us-east-1",
			Addresses: []string{nodeAddrs[name]}}))
	}
}

// exchangeFrom is exchangeErr in class IN, sent from address from.
func exchangeFrom(c *harness.CoreDNS, proto, from, qname string, qtype uint16) (*dns.Msg, error) {
	r, err := askFrom(c, proto, from, "", qname, qtype)
	if err != nil {
		return nil, fmt.Errorf("%s %s over %s from %s: %w", dns.TypeToString[qtype], qname, proto, from, err)
	}
	return r, nil
}

// exchangeErr asks one question and returns the reply, or an error (never fails the test: the
// caller polls).
func exchangeErr(c *harness.CoreDNS, proto, qname string, qtype, class uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.Question[0].Qclass = class
	m.SetEdns0(4096, false)
	r, _, err := (&dns.Client{Net: proto}).Exchange(m, c.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s over %s: %w", dns.TypeToString[qtype], qname, proto, err)
	}
	return r, nil
}

func expectRcode(c *harness.CoreDNS, proto, qname string, rcode int) error {
	r, err := exchangeErr(c, proto, qname, dns.TypeA, dns.ClassINET)
	if err != nil {
		return err
	}
	if r.Rcode != rcode {
		return fmt.Errorf("A %s over %s: %s %v, want %s", qname, proto, dns.RcodeToString[r.Rcode], render(r.Answer), dns.RcodeToString[rcode])
	}
	return nil
}

// expectSet checks that qname's answer of qtype is exactly want, in any order (none: NODATA):
// addresses for A and AAAA, "port target" for SRV.
func expectSet(c *harness.CoreDNS, proto, qname string, qtype uint16, want []string) error {
	r, err := exchangeErr(c, proto, qname, qtype, dns.ClassINET)
	if err != nil {
		return err
	}
	var got []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			got = append(got, rr.A.String())
		case *dns.AAAA:
			got = append(got, rr.AAAA.String())
		case *dns.SRV:
			got = append(got, fmt.Sprintf("%d %s", rr.Port, rr.Target))
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
		return fmt.Errorf("%s %s over %s: %s %v, want %v", dns.TypeToString[qtype], qname, proto, dns.RcodeToString[r.Rcode], got, want)
	}
	return nil
}

// explainLines is the CH TXT explanation of qname over TCP (never truncated).
func explainLines(c *harness.CoreDNS, qname string) ([]string, error) {
	r, err := exchangeErr(c, "tcp", qname, dns.TypeTXT, dns.ClassCHAOS)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, rr := range r.Answer {
		if t, ok := rr.(*dns.TXT); ok {
			lines = append(lines, strings.Join(t.Txt, ""))
		}
	}
	return lines, nil
}

// checkWritten compares the written Services and slices of namespaces with the oracle's: one
// <svc>-global Service per global service and, in its slices, every record (ready or not) of
// every member, by cluster, address and readiness; nothing else of ours.
func checkWritten(ctx context.Context, c kubernetes.Interface, namespaces []string, want map[string]*oracleService) error {
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

// sortRecords orders records for printing.
func sortRecords(rs []oracleRecord) []oracleRecord {
	return slices.SortedFunc(slices.Values(rs), func(a, b oracleRecord) int {
		return cmp.Or(cmp.Compare(a.cluster, b.cluster), netip.MustParseAddr(a.addr).Compare(netip.MustParseAddr(b.addr)))
	})
}
