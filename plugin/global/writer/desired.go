package writer

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// What marks the objects the writer manages. Only objects carrying these labels, with this
// writer's LabelWriter, are ever updated or deleted; anything else in the way is reported and left
// alone.
const (
	Domain       = contract.Domain
	LabelService = contract.LabelService
	LabelCluster = contract.LabelCluster
	// LabelManagedBy and ManagedBy mark the Service (and slices) as written by this plugin, the
	// Kubernetes way.
	LabelManagedBy = contract.LabelManagedBy
	ManagedBy      = contract.ManagedBy
	// LabelWriter names the writer that owns an object (see Owner): another deployment of the
	// plugin, with a lease of its own, may write objects with the labels above too.
	LabelWriter = contract.LabelWriter
	// SlicesManagedBy is our value of endpointslice.kubernetes.io/managed-by (on slices only).
	SlicesManagedBy = contract.SlicesManagedBy

	DefaultSuffix = contract.DefaultSuffix
	// MCSSuffix ends the names of the MCS slices of a global service: <svc>-mcs-<cluster>-...
	MCSSuffix           = "-mcs"
	DefaultMaxEndpoints = 100
	MaxEndpointsLimit   = 1000 // the API's limit per slice
)

// group is the endpoints of one member cluster and address family: each group has its own slices,
// so a change in one cluster rewrites only that cluster's slices.
type group struct {
	cluster string
	family  discoveryv1.AddressType
}

// compareGroups orders groups by cluster and family.
func compareGroups(a, b group) int {
	return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.family, b.family))
}

// endpoint is one desired endpoint of a slice.
type endpoint struct {
	id       string // hostname/address: the order in which new endpoints fill slices
	ep       discoveryv1.Endpoint
	ports    []discoveryv1.EndpointPort
	portsKey string // slices hold endpoints with equal ports only
}

// desiredService returns the headless selector-less Service `<svc><suffix>` for s, with the union
// of its members' ports. The API rejects a Service with two ports of one name, or of one number and
// protocol: a port joins only when neither is taken, so the first member to have it wins (members
// are in index order: the local Service first, then the mirrors by cluster name). Linked clusters
// that renamed a port (db:5432 here, postgres:5432 there) thus still get one valid Service.
func desiredService(s *index.Service, name, owner string) *corev1.Service {
	var ports []corev1.ServicePort
	// What is taken, by name and by number and protocol: linear in the ports, which a Service may
	// have thousands of.
	names, numbers := map[string]bool{}, map[index.Port]bool{}
	for _, m := range s.Members {
		for _, p := range m.Ports {
			number := index.Port{Port: p.Port, Protocol: p.Protocol}
			if !names[p.Name] && !numbers[number] {
				names[p.Name], numbers[number] = true, true
				ports = append(ports, corev1.ServicePort{Name: p.Name, Port: p.Port, Protocol: corev1.Protocol(p.Protocol), TargetPort: intstr.FromInt32(p.Port)})
			}
		}
	}
	if len(ports) > 1 {
		// The API requires names when there are several ports; an unnamed one cannot be listed.
		ports = slices.DeleteFunc(ports, func(p corev1.ServicePort) bool { return p.Name == "" })
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name, Labels: ownLabels(s.Name, owner), Annotations: s.ServiceAnnotations()},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: ports},
	}
}

// Owner is the LabelWriter value of the writer elected on Lease namespace/name, <namespace>.<name>
// (shortened with a hash when longer than a label value may be). The replicas that share a lease
// are one writer: they write in turn, and must share the settings that decide what is written.
func Owner(namespace, name string) string {
	v := namespace + "." + name
	if len(v) > validation.LabelValueMaxLength {
		v = hashed(v, v, validation.LabelValueMaxLength)
	}
	return v
}

// ownLabels are the labels of everything owner writes for global service service.
func ownLabels(service, owner string) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelService: service, LabelWriter: owner}
}

// ServiceSelector and SliceSelector select the Services and EndpointSlices owner wrote.
func ServiceSelector(owner string) string {
	return LabelManagedBy + "=" + ManagedBy + "," + LabelWriter + "=" + owner
}

func SliceSelector(owner string) string {
	return discoveryv1.LabelManagedBy + "=" + SlicesManagedBy + "," + ServiceSelector(owner)
}

// desiredEndpoints returns every endpoint of s, ready or not, by group. The -global slices name an
// endpoint <host>-<cluster> (unique in one Service); the MCS slices, whose names are
// <host>.<cluster>.<svc>..., keep the host as it is. names are the -global hostnames (nil for MCS).
func desiredEndpoints(s *index.Service, names map[clusterHost]string) map[group][]endpoint {
	rs := s.Records()
	out := map[group][]endpoint{}
	// Each group's list made at its size: appended to, it would be copied a dozen times.
	sizes := map[group]int{}
	for r := range rs.All() {
		sizes[groupOf(r)]++
	}
	for g, n := range sizes {
		out[g] = make([]endpoint, 0, n)
	}
	d := newDesire(s.Topology(), s.Namespace)
	// Every endpoint's address list and hostname, two allocations, not two per endpoint.
	addrs, hns := make([]string, rs.Len()), make([]string, rs.Len())
	i := -1
	for r := range rs.All() {
		i++
		hns[i] = r.Host
		if names != nil {
			hns[i] = names[clusterHost{r.Cluster, r.Host}]
		}
		addrs[i] = r.Addr().String()
		g := groupOf(r)
		out[g] = append(out[g], d.endpoint(r, addrs[i:i+1:i+1], &hns[i]))
	}
	return out
}

// desire makes the desired endpoints of one service's records. What records share is made once
// and shared: a sync of a big service is one of these per endpoint, and the endpoints are only
// read (compared with the API's and sent to it).
type desire struct {
	topo     *index.Topology
	ns       string
	zones    map[string]*string // by cluster
	origin   *index.Origin
	ports    []discoveryv1.EndpointPort
	portsKey string
}

func newDesire(topo *index.Topology, ns string) *desire {
	return &desire{topo: topo, ns: ns, zones: map[string]*string{}}
}

// endpoint is r's desired endpoint, of address list addrs and hostname.
func (d *desire) endpoint(r *index.Record, addrs []string, hostname *string) endpoint {
	zone, ok := d.zones[r.Cluster]
	if !ok {
		zone = nonEmpty(d.topo.Zone(r.Cluster))
		d.zones[r.Cluster] = zone
	}
	e := endpoint{
		id: *hostname + "/" + addrs[0],
		ep: discoveryv1.Endpoint{
			Addresses:  addrs,
			Conditions: discoveryv1.EndpointConditions{Ready: boolPtr(r.Ready), Serving: boolPtr(r.Serving), Terminating: boolPtr(r.Terminating)},
			Hostname:   hostname,
			// A mirrored endpoint is in its cluster's zone; a local pod, in its node's.
			Zone: zone,
		},
	}
	// Node and pod only exist in this cluster.
	if r.Cluster == d.topo.Local && r.Local != nil {
		e.ep.Zone = nonEmpty(r.Local.Zone)
		e.ep.NodeName = nonEmpty(r.Local.NodeName)
		if r.Local.Pod != "" {
			e.ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: d.ns, Name: r.Local.Pod}
		}
	}
	if r.Origin != d.origin {
		d.origin = r.Origin
		d.ports, d.portsKey = slicePorts(r.Ports)
	}
	e.ports, e.portsKey = d.ports, d.portsKey
	return e
}

// groupOf is the group of slices of r: its cluster and family.
func groupOf(r *index.Record) group {
	if r.Family() == index.IPv6 {
		return group{r.Cluster, discoveryv1.AddressTypeIPv6}
	}
	return group{r.Cluster, discoveryv1.AddressTypeIPv4}
}

// boolPtrs are the conditions of every desired endpoint: shared, never written through.
var boolPtrs = [2]*bool{ptr.To(false), ptr.To(true)}

func boolPtr(b bool) *bool {
	if b {
		return boolPtrs[1]
	}
	return boolPtrs[0]
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return ptr.To(s)
}

// slicePorts converts ports as the API stores them (name and protocol always set) and returns a
// key that is equal for equal port lists.
func slicePorts(ps []index.Port) ([]discoveryv1.EndpointPort, string) {
	out := make([]discoveryv1.EndpointPort, len(ps))
	for i, p := range ps {
		out[i] = discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.Port), Protocol: ptr.To(corev1.Protocol(p.Protocol))}
	}
	return out, index.PortsKey(ps)
}

type clusterHost struct{ cluster, host string }

// name is the endpoint hostname of (cluster, host) in the -global slices, unless hostnames had
// to give it another: <host>-<cluster>.
func (k clusterHost) name() string { return k.host + "-" + k.cluster }

// hostnames gives every (cluster, host) the endpoint hostname <host>-<cluster>: a DNS label, unique
// within the service, the same on every run. A name that is too long, or that two endpoints would
// share (foo-0 in a-b and foo-0-a in b), is shortened and suffixed with a hash of its origin.
func hostnames(rs index.Records) map[clusterHost]string {
	count := make(map[string]int, rs.Len())
	names := make(map[clusterHost]string, rs.Len())
	for r := range rs.All() {
		k := clusterHost{r.Cluster, r.Host}
		if _, ok := names[k]; !ok {
			n := k.name()
			names[k] = n
			count[n]++
		}
	}
	for k, n := range names {
		if len(n) > 63 || count[n] > 1 {
			names[k] = hashed(n, k.cluster+"/"+k.host, 63)
		}
	}
	return names
}

// hashed shortens name to at most limit bytes, ending in a hash of origin.
func hashed(name, origin string, limit int) string {
	h := fnv.New32a()
	h.Write([]byte(origin))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	if len(name) > limit-len(suffix) {
		name = name[:limit-len(suffix)]
	}
	return strings.TrimRight(name, "-.") + suffix
}

// sliceName is the name of slice i of group g of Service svc: deterministic, so two writers that
// overlap for a moment write the same objects.
func sliceName(svc string, g group, i int) string {
	fam := "ipv4"
	if g.family == discoveryv1.AddressTypeIPv6 {
		fam = "ipv6"
	}
	prefix := svc + "-" + g.cluster + "-" + fam
	if len(prefix) > 240 { // names are DNS subdomains of at most 253 bytes
		prefix = hashed(prefix, prefix, 240)
	}
	return prefix + "-" + strconv.Itoa(i)
}

// sliceIndex returns i when name is sliceName(svc, g, i).
func sliceIndex(name, svc string, g group) (int, bool) {
	prefix := strings.TrimSuffix(sliceName(svc, g, 0), "0")
	i, err := strconv.Atoi(strings.TrimPrefix(name, prefix))
	if err != nil || !strings.HasPrefix(name, prefix) || i < 0 || sliceName(svc, g, i) != name {
		return 0, false
	}
	return i, true
}
