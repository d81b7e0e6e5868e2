package watch

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeTable is where clients run, by Node: immutable, made again at every change that matters (a
// cluster has thousands of Nodes at most, and they change rarely). It never names a node it is not
// sure of: an address two Nodes give, or a pod CIDR that overlaps another Node's (both are
// misconfigurations, and they happen), locates no client, so queries from there get the
// cluster's view, the same every time.
type nodeTable struct {
	// byIPv4 and byAddr hold the clients by each of their Node's addresses, IPv4 ones by their 32
	// bits: a ranked query looks one up, and a map of uint32 keys is some 100 instructions
	// cheaper to read than one of netip.Addr (callgrind, BenchmarkServeDNS/client).
	byIPv4 map[uint32]*index.Client
	byAddr map[netip.Addr]*index.Client
	byName map[string]*index.Client
	// cidrs holds, per length of the Node pod CIDRs there are, the Nodes by their CIDR.
	cidrs map[int]map[netip.Prefix]*index.Client
	// conflicts describes the addresses and CIDRs left out, as a log line says them.
	conflicts []string
}

// node returns the client at a Node's address a, nil for none.
func (t *nodeTable) node(a netip.Addr) *index.Client {
	if a.Is4() {
		return t.byIPv4[ipv4Key(a)]
	}
	return t.byAddr[a]
}

// ipv4Key is IPv4 address a as the key of nodeTable.byIPv4.
func ipv4Key(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

// inCIDR returns the client at an address of prefix p in a Node's pod CIDR, and that CIDR's length.
func (t *nodeTable) inCIDR(p netip.Prefix) (*index.Client, int) {
	for bits, nodes := range t.cidrs {
		if p.Bits() < bits {
			continue // p spans more than one pod CIDR
		}
		if c := nodes[netip.PrefixFrom(p.Addr(), bits).Masked()]; c != nil {
			return c, bits // CIDRs do not overlap: the only one
		}
	}
	return nil, 0
}

// newNodeTable makes the table of nodes.
func newNodeTable(nodes []*corev1.Node) *nodeTable {
	t := &nodeTable{byAddr: map[netip.Addr]*index.Client{}, byName: map[string]*index.Client{}, cidrs: map[int]map[netip.Prefix]*index.Client{}}
	shared := map[netip.Addr][]string{}
	var owned []ownedCIDR
	for _, n := range nodes {
		client := &index.Client{Node: n.Name, Labels: n.Labels}
		t.byName[n.Name] = client
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue
			}
			ip = ip.Unmap()
			if other := t.byAddr[ip]; other != nil && other != client || shared[ip] != nil {
				shared[ip] = appendNew(shared[ip], n.Name)
				if other != nil {
					shared[ip] = appendNew(shared[ip], other.Node)
				}
				continue
			}
			t.byAddr[ip] = client
		}
		for _, cidr := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				owned = append(owned, ownedCIDR{p.Masked(), client})
			}
		}
	}
	for ip, names := range shared {
		delete(t.byAddr, ip)
		slices.Sort(names)
		t.conflicts = append(t.conflicts, fmt.Sprintf("address %s is given by Nodes %s", ip, strings.Join(names, ", ")))
	}
	t.byIPv4 = make(map[uint32]*index.Client, len(t.byAddr))
	for ip, client := range t.byAddr {
		if ip.Is4() {
			t.byIPv4[ipv4Key(ip)] = client
			delete(t.byAddr, ip)
		}
	}
	for _, o := range owned {
		if t.cidrs[o.p.Bits()] == nil {
			t.cidrs[o.p.Bits()] = map[netip.Prefix]*index.Client{}
		}
		t.cidrs[o.p.Bits()][o.p] = o.client
	}
	for _, o := range overlapping(owned) {
		delete(t.cidrs[o.p.Bits()], o.p)
		t.conflicts = append(t.conflicts, fmt.Sprintf("pod CIDR %s of Node %s overlaps another Node's", o.p, o.client.Node))
	}
	slices.Sort(t.conflicts)
	return t
}

// ownedCIDR is a Node's pod CIDR.
type ownedCIDR struct {
	p      netip.Prefix
	client *index.Client
}

// overlapping returns the CIDRs of cs that overlap another Node's: sorted by address, then
// length, a CIDR that overlaps an earlier one is inside it, and inside the innermost earlier one
// that still holds its address.
func overlapping(cs []ownedCIDR) []ownedCIDR {
	sorted := slices.Clone(cs)
	slices.SortFunc(sorted, func(a, b ownedCIDR) int {
		return cmp.Or(a.p.Addr().Compare(b.p.Addr()), cmp.Compare(a.p.Bits(), b.p.Bits()))
	})
	bad := map[ownedCIDR]bool{}
	var enclosing []ownedCIDR
	for _, c := range sorted {
		for len(enclosing) > 0 && !enclosing[len(enclosing)-1].p.Contains(c.p.Addr()) {
			enclosing = enclosing[:len(enclosing)-1]
		}
		for _, e := range enclosing {
			if e.client.Node != c.client.Node {
				bad[e], bad[c] = true, true
			}
		}
		enclosing = append(enclosing, c)
	}
	var out []ownedCIDR
	for _, c := range sorted {
		if bad[c] {
			out = append(out, c)
		}
	}
	return out
}

// appendNew appends s to l unless l has it.
func appendNew(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
}

// slimNode keeps of a Node what a client's place is made of: its labels of keys (the topology
// keys), addresses and pod CIDRs.
func slimNode(keys []string, obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a deletion's last state
	}
	labels := map[string]string{}
	for _, k := range keys {
		if v, ok := n.Labels[k]; ok {
			labels[k] = v
		}
	}
	var addrs []corev1.NodeAddress
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			addrs = append(addrs, corev1.NodeAddress{Type: a.Type, Address: a.Address})
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion, Labels: labels},
		Spec:       corev1.NodeSpec{PodCIDRs: n.Spec.PodCIDRs},
		Status:     corev1.NodeStatus{Addresses: addrs},
	}, nil
}

// nodeChanged reports whether two versions of a Node differ in what is kept of them: a Node
// changes with every status update.
func nodeChanged(old, new any) bool {
	o, n := old.(*corev1.Node), new.(*corev1.Node)
	return !maps.Equal(o.Labels, n.Labels) || !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) ||
		!slices.Equal(o.Status.Addresses, n.Status.Addresses)
}
