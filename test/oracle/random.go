package oracle

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
)

// Random plays a random history of a World from a seed: its first state, then one change at a
// time, as clusters change (pods, readiness, gateways, exports, mirrors, ports, Links, localities,
// Nodes deleted and their pod CIDRs given to new ones), and the questions asked of it.
//
// Objects are changed by replacing them, never in place: a Member whose slices change keeps its
// pointer and gets new Slices; one whose ports change is a new Member. Whoever feeds the world to
// the plugin tells what changed by comparing pointers.
type Random struct {
	W     *World
	rng   *rand.Rand
	ips   int                 // addresses handed out
	taken map[netip.Addr]bool // every address handed out, never again
	big   bool                // handing out a big service's addresses
	nodes int                 // Nodes made
	hosts int                 // local pods named
}

var (
	linkable   = []string{"west", "north", "south", "alpha"} // alpha's name sorts before this cluster's
	namespaces = []string{"db", "app", "foo"}                // foo is a service's name too
	services   = []string{"foo", "bar", "big", "db"}
	zones      = []string{"za", "zb", "zc", "zx"}
	// The ports local slices and mirror Services have, named as SRV names ask for them.
	portsOf = []Port{{"db", 5432, "TCP"}, {"http", 8080, "TCP"}, {"dns", 53, "UDP"}}
)

// NewRandom returns the first state of the history of seed.
func NewRandom(seed uint64) *Random {
	r := &Random{rng: rand.New(rand.NewPCG(seed, 0x5eed)), taken: map[netip.Addr]bool{}}
	w := &World{Cluster: "east", Locality: map[string]map[string]string{"east": {Zone: "za", Region: "r1"}}}
	r.W = w
	w.Zones = []string{"global.", "near.global."}
	w.TTL = []uint32{5, 30}[r.rng.IntN(2)]
	w.Rotate = r.rng.IntN(5) > 0
	w.Keys = []string{Zone, Region}
	w.ClientKeys = []string{Hostname, Zone, InThis, Region}
	w.Policies = map[string]int{"near.global.": 1 + r.rng.IntN(3)}
	if r.rng.IntN(4) == 0 {
		w.Policies[""] = []int{1, 2, 5}[r.rng.IntN(3)]
	}
	if r.rng.IntN(3) == 0 {
		w.PreferNamespaces = []string{"db"}
	}
	w.ClientLocality = [][]string{nil, {"node"}, {"node", "pod"}, {"ecs", "node", "pod"}, {"ecs"}}[r.rng.IntN(5)]
	w.ECSFrom = []netip.Prefix{netip.MustParsePrefix("10.1.8.8/32")}
	w.Forwarders = []netip.Addr{netip.MustParseAddr("10.1.9.9")}
	for _, c := range linkable {
		r.relocate(c)
	}
	r.relink()
	for i := range 6 {
		r.addNode(zones[i/2], cidrOf(i+1))
	}
	for range 8 + r.rng.IntN(8) { // most of 12 names
		r.addService()
	}
	for range 6 {
		r.addPod(r.W.Nodes[r.rng.IntN(len(r.W.Nodes))].Name)
	}
	return r
}

func cidrOf(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
}

// relocate gives linked cluster c a random locality, or none.
func (r *Random) relocate(c string) {
	if r.rng.IntN(6) == 0 {
		delete(r.W.Locality, c)
		return
	}
	r.W.Locality[c] = map[string]string{Zone: zones[r.rng.IntN(len(zones))], Region: []string{"r1", "r2"}[r.rng.IntN(2)]}
}

// relink sets which clusters Links name: none served (nil), none read, or some.
func (r *Random) relink() {
	switch r.rng.IntN(5) {
	case 0:
		r.W.Linked = nil
	case 1:
		r.W.Linked = map[string]bool{}
	default:
		r.W.Linked = map[string]bool{}
		for _, c := range linkable {
			if r.rng.IntN(4) > 0 {
				r.W.Linked[c] = true
			}
		}
	}
}

// addr hands out a new address: a local pod's in its node's pod CIDR while it has room, else
// one of 10.100.0.0/14 (a mirror's per-pod ClusterIP, or a pod of a big service); IPv6 one time in
// six.
func (r *Random) addr(node string) netip.Addr {
	if r.rng.IntN(6) == 0 {
		return r.familyAddr(true)
	}
	if nd := r.W.node(node); nd != nil && len(nd.CIDRs) > 0 && !r.big {
		for range 8 {
			b := nd.CIDRs[0].Addr().As4()
			a := netip.AddrFrom4([4]byte{b[0], b[1], b[2], byte(1 + r.rng.IntN(250))})
			if !r.used(a) {
				return a
			}
		}
	}
	return r.familyAddr(false)
}

// used reports whether a was handed out, and takes it.
func (r *Random) used(a netip.Addr) bool {
	was := r.taken[a]
	r.taken[a] = true
	return was
}

// addNode adds a Node in zone with pod CIDR cidr.
func (r *Random) addNode(zone string, cidr netip.Prefix) *Node {
	r.nodes++
	n := &Node{Name: fmt.Sprintf("n%d", r.nodes), Labels: map[string]string{Zone: zone, Region: "r1"},
		Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(r.nodes / 250), byte(1 + r.nodes%250)})}, CIDRs: []netip.Prefix{cidr}}
	r.W.Nodes = append(r.W.Nodes, n)
	return n
}

// addService adds a global service of a few members, or now and then a big one: of 100 to 5,000
// local endpoints, a port that some of its slices only have; "" when it has it already.
func (r *Random) addService() string {
	ns, name := namespaces[r.rng.IntN(len(namespaces))], services[r.rng.IntN(len(services))]
	for _, s := range r.W.Services {
		if s.Namespace == ns && s.Name == name {
			return ""
		}
	}
	s := &Service{Namespace: ns, Name: name}
	r.W.Services = append(r.W.Services, s)
	if name == "big" && r.rng.IntN(2) == 0 {
		n := []int{100, 150, 600, 2000, 5000}[r.rng.IntN(5)]
		s.Members = append(s.Members, r.bigLocal(n))
		return fmt.Sprintf("service %s/%s of %d local endpoints", ns, name, n)
	}
	if r.rng.IntN(4) > 0 {
		s.Members = append(s.Members, r.local())
	}
	for range r.rng.IntN(3) {
		r.addMirror(s)
	}
	return fmt.Sprintf("service %s/%s, members %s", ns, name, describeMembers(s))
}

func describeMembers(s *Service) string {
	var out []string
	for _, m := range s.Members {
		n := 0
		for _, sl := range m.Slices {
			n += len(sl.Endpoints)
		}
		out = append(out, fmt.Sprintf("%s(%s, %d endpoints)", m.Name, m.Cluster, n))
	}
	return fmt.Sprint(out)
}

// local returns a local member Service of one or two slices of a few endpoints.
func (r *Random) local() *Member {
	m := &Member{Name: "local"}
	for i := range 1 + r.rng.IntN(2) {
		m.Slices = append(m.Slices, r.localSlice(1-i+r.rng.IntN(5)))
	}
	return m
}

// bigLocal returns a local member of n endpoints in slices of 100, over every node; the first
// slice alone has port dns.
func (r *Random) bigLocal(n int) *Member {
	r.big = true
	defer func() { r.big = false }()
	m := &Member{Name: "local"}
	for at := 0; at < n; at += 100 {
		sl := &Slice{Ports: []Port{portsOf[0], portsOf[1]}}
		if at == 0 {
			sl.Ports = []Port{portsOf[2]}
		}
		v6 := r.rng.IntN(4) == 0
		for range min(100, n-at) {
			node := r.W.Nodes[r.rng.IntN(len(r.W.Nodes))]
			e := r.endpoint(node.Name)
			if e.Addr.Is6() != v6 {
				e.Addr = r.familyAddr(v6)
			}
			sl.Endpoints = append(sl.Endpoints, e)
		}
		m.Slices = append(m.Slices, sl)
	}
	return m
}

// familyAddr hands out a new address of IPv6 or IPv4 outside the pod CIDRs.
func (r *Random) familyAddr(v6 bool) netip.Addr {
	for {
		r.ips++
		a := netip.AddrFrom4([4]byte{10, byte(100 + r.ips/65536), byte(r.ips / 256 % 256), byte(r.ips % 256)})
		if v6 {
			a = netip.MustParseAddr(fmt.Sprintf("fd00::%x", r.ips))
		}
		if !r.used(a) {
			return a
		}
	}
}

// localSlice returns a slice of n local endpoints of one family, and ports.
func (r *Random) localSlice(n int) *Slice {
	sl := &Slice{}
	for _, p := range portsOf {
		if r.rng.IntN(2) == 0 {
			sl.Ports = append(sl.Ports, p)
		}
	}
	v6 := r.rng.IntN(5) == 0
	for range n {
		node := r.W.Nodes[r.rng.IntN(len(r.W.Nodes))]
		e := r.endpoint(node.Name)
		if e.Addr.Is6() != v6 {
			e.Addr = r.familyAddr(v6)
		}
		sl.Endpoints = append(sl.Endpoints, e)
	}
	return sl
}

// endpoint returns a new local endpoint on node, in its zone mostly, ready mostly, and its Pod.
func (r *Random) endpoint(node string) *Endpoint {
	r.hosts++
	e := &Endpoint{Host: fmt.Sprintf("p-%d", r.hosts), Ready: r.rng.IntN(5) > 0, Node: node}
	e.Addr = r.addr(node)
	if nd := r.W.node(node); nd != nil && r.rng.IntN(8) > 0 {
		e.Zone = nd.Labels[Zone]
	}
	if !r.big {
		r.W.Pods = append(r.W.Pods, &Pod{IP: e.Addr, Node: node})
	}
	return e
}

// addMirror adds to s a headless mirror of a cluster it has none of: now and then of this
// cluster's name, or a second one of a cluster, not named as Linkerd names it.
func (r *Random) addMirror(s *Service) {
	c := linkable[r.rng.IntN(len(linkable))]
	name := s.Name + "-" + c
	switch {
	case r.rng.IntN(12) == 0:
		c, name = r.W.Cluster, s.Name+"-"+r.W.Cluster
	case slices.ContainsFunc(s.Members, func(m *Member) bool { return m.Cluster == c }):
		name = s.Name + "-x-" + c
	}
	if slices.ContainsFunc(s.Members, func(m *Member) bool { return m.Name == name }) {
		return
	}
	m := &Member{Name: name, Cluster: c, Ports: []Port{portsOf[0], {"http", 80, "TCP"}}}
	sl := &Slice{Ports: []Port{{"db", 15432, "TCP"}, {"http", 18080, "TCP"}}}
	if r.rng.IntN(3) == 0 {
		sl.Ports = sl.Ports[:1]
	}
	v6 := r.rng.IntN(6) == 0
	for i := range 1 + r.rng.IntN(4) {
		e := &Endpoint{Host: fmt.Sprintf("%s-%d", s.Name, i), Addr: r.familyAddr(v6), Ready: r.rng.IntN(5) > 0}
		if r.rng.IntN(2) == 0 {
			up := r.rng.IntN(4) > 0
			e.Gateway = &up
		}
		sl.Endpoints = append(sl.Endpoints, e)
	}
	m.Slices = []*Slice{sl}
	s.Members = append(s.Members, m)
}

// addPod adds a Pod on node that is no endpoint: a client.
func (r *Random) addPod(node string) {
	r.W.Pods = append(r.W.Pods, &Pod{IP: r.addr(node), Node: node})
}
