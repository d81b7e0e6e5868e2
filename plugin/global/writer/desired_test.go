package writer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

func TestHostnames(t *testing.T) {
	long := strings.Repeat("x", 60)
	rec := func(cluster, host string) index.Record {
		return index.Record{Endpoint: &index.Endpoint{Host: host}, Origin: &index.Origin{Cluster: cluster}}
	}
	rs := []index.Record{
		rec("west", "foo-0"),
		rec("west", "foo-0"), // the same endpoint's second address
		rec("a-b", "foo-0"),  // foo-0-a-b ...
		rec("b", "foo-0-a"),  // ... and foo-0-a-b again
		rec("east", long),
	}
	names := hostnames(index.RecordsOf(rs))
	if got := names[clusterHost{"west", "foo-0"}]; got != "foo-0-west" {
		t.Errorf("plain name %q", got)
	}
	seen := map[string]bool{}
	for k, n := range names {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("%v: %q is not a DNS label: %v", k, n, errs)
		}
		if seen[n] {
			t.Errorf("%q given twice", n)
		}
		seen[n] = true
	}
	if a, b := names[clusterHost{"a-b", "foo-0"}], names[clusterHost{"b", "foo-0-a"}]; a == "foo-0-a-b" || b == "foo-0-a-b" {
		t.Errorf("colliding names not disambiguated: %q %q", a, b)
	}
	if again := hostnames(index.RecordsOf(rs)); fmt.Sprint(again) != fmt.Sprint(names) {
		t.Errorf("not deterministic: %v vs %v", again, names)
	}
}

func TestSliceNames(t *testing.T) {
	for _, g := range []group{{"west", discoveryv1.AddressTypeIPv4}, {"west", discoveryv1.AddressTypeIPv6}, {strings.Repeat("c", 63), discoveryv1.AddressTypeIPv4}} {
		svc := "foo-global"
		for _, i := range []int{0, 7, 12} {
			n := sliceName(svc, g, i)
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Errorf("%q: %v", n, errs)
			}
			if got, ok := sliceIndex(n, svc, g); !ok || got != i {
				t.Errorf("sliceIndex(%q) = %d, %v; want %d", n, got, ok, i)
			}
		}
	}
	if n := sliceName("foo-global", group{"west", discoveryv1.AddressTypeIPv4}, 2); n != "foo-global-west-ipv4-2" {
		t.Errorf("name %q", n)
	}
	for _, bad := range []string{"foo-global-west-ipv4-", "foo-global-west-ipv4-x", "foo-global-west-ipv6-1", "foo-global-west-ipv4-01", "bar-west-ipv4-1"} {
		if _, ok := sliceIndex(bad, "foo-global", group{"west", discoveryv1.AddressTypeIPv4}); ok {
			t.Errorf("sliceIndex(%q) accepted", bad)
		}
	}
}

func TestDesired(t *testing.T) {
	src := indextest.New()
	k := index.Key{Namespace: "db", Name: "foo"}
	local := indextest.Endpoint("foo-0", "10.0.0.1")
	local.Local = &index.Placement{Zone: "z1", NodeName: "node-a", Pod: "foo-0"}
	src.Add(k, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}, {Name: "admin", Port: 8080, Protocol: "TCP"}}}},
		indextest.Slice([]index.Port{{Name: "db", Port: 15432, Protocol: "TCP"}}, local))
	// west exposes 8080 as "web" (a rename), and 8080/UDP as "stats": the name or the number and
	// protocol taken, "web" cannot join; "stats" can.
	src.Add(k, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: []index.Port{
		{Name: "db", Port: 5432, Protocol: "TCP"}, {Name: "metrics", Port: 9000, Protocol: "TCP"},
		{Name: "web", Port: 8080, Protocol: "TCP"}, {Name: "stats", Port: 8080, Protocol: "UDP"}}}},

		indextest.Slice([]index.Port{{Name: "db", Port: 15432, Protocol: "TCP"}}, indextest.NotReady(indextest.Endpoint("foo-0", "10.96.0.1"))))
	s := indextest.Topology().Build(k, src)

	svc := desiredService(s, "foo-global", testOwner)
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d/%s>%s", p.Name, p.Port, p.Protocol, p.TargetPort.String()))
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector != nil ||
		!slices.Equal(ports, []string{"db:5432/TCP>5432", "admin:8080/TCP>8080", "metrics:9000/TCP>9000", "stats:8080/UDP>8080"}) {
		t.Errorf("service %+v ports %v", svc.Spec, ports)
	}
	if svc.Labels[LabelManagedBy] != ManagedBy || svc.Labels[LabelService] != "foo" || svc.Labels[LabelWriter] != testOwner {
		t.Errorf("labels %v", svc.Labels)
	}

	eps := desiredEndpoints(s, hostnames(s.Records()))
	east := eps[group{"east", discoveryv1.AddressTypeIPv4}]
	west := eps[group{"west", discoveryv1.AddressTypeIPv4}]
	if len(east) != 1 || len(west) != 1 || len(eps) != 2 {
		t.Fatalf("groups %v", eps)
	}
	e := east[0].ep
	if *e.Hostname != "foo-0-east" || *e.Zone != "z1" || *e.NodeName != "node-a" || e.TargetRef == nil || e.TargetRef.Name != "foo-0" || !*e.Conditions.Ready {
		t.Errorf("local endpoint %+v", e)
	}
	if p := east[0].ports; len(p) != 1 || *p[0].Port != 15432 {
		t.Errorf("local slice ports %v: want the pods' port", p)
	}
	w := west[0].ep
	if *w.Hostname != "foo-0-west" || w.Zone == nil || *w.Zone != "z1" || w.NodeName != nil || w.TargetRef != nil || *w.Conditions.Ready {
		t.Errorf("mirrored endpoint %+v (zone: west's locality; no node or pod; not ready)", w)
	}
	if p := west[0].ports; len(p) != 1 || *p[0].Port != 5432 || *p[0].Name != "db" || ptr.Deref(p[0].Protocol, "") != corev1.ProtocolTCP {
		t.Errorf("mirror slice ports %v: want the mirror Service's port", p)
	}
}

func TestOwnerIsALabelValue(t *testing.T) {
	long := strings.Repeat("lease.", 40) + "x"
	for _, c := range []struct{ ns, name, want string }{
		{"kube-system", "coredns-global-writer", "kube-system.coredns-global-writer"},
		{"coredns-global", long, ""},
	} {
		got := Owner(c.ns, c.name)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 || (c.want != "" && got != c.want) || got != Owner(c.ns, c.name) {
			t.Errorf("Owner(%s, %s) = %q: %v", c.ns, c.name, got, errs)
		}
	}
	if Owner("a", long) == Owner("a", long+"y") {
		t.Error("two long leases share an owner")
	}
}

// BenchmarkDesiredEndpoints is the writer's desired state of a global service of 10,000
// endpoints: what every sync of it computes.
func BenchmarkDesiredEndpoints(b *testing.B) {
	_, _, _, _, svc := bigGlobalService(100)
	b.ReportAllocs()
	for b.Loop() {
		if n := len(desiredEndpoints(svc, hostnames(svc.Records()))); n != 1 {
			b.Fatal(n)
		}
	}
}

// bigGlobalService is a global service db/big of 10,000 endpoints, in slices of per, and its source.
func bigGlobalService(per int) (*indextest.Source, index.Key, *index.Member, *index.Topology, *index.Service) {
	src := indextest.New()
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	k := index.Key{Namespace: "db", Name: "big"}
	var sls []*index.Slice
	for s := 0; s < 10000; s += per {
		var eps []index.Endpoint
		for e := s; e < min(s+per, 10000); e++ {
			eps = append(eps, indextest.Endpoint(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.1.%d.%d", e/250, e%250)))
		}
		sls = append(sls, indextest.Slice(ports, eps...))
	}
	m := src.Add(k, &index.Member{Namespace: "db", Name: "big", Origin: index.Origin{Ports: ports}}, sls...)
	topo := indextest.Topology()
	return src, k, m, topo, topo.Build(k, src)
}
