package watch

import (
	"context"
	"maps"
	"net/netip"
	"slices"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// nodeTable is where clients run, by Node: immutable, made again at every change that matters (a
// cluster has thousands of Nodes at most, and they change rarely).
type nodeTable struct {
	byAddr map[netip.Addr]*index.Client // by each of a Node's addresses
	byName map[string]*index.Client
	// cidrs holds, per length of the Node pod CIDRs there are, the Nodes by their CIDR.
	cidrs map[int]map[netip.Prefix]*index.Client
}

// inCIDR returns the client at an address of prefix p in a Node's pod CIDR, and that CIDR's length.
func (t *nodeTable) inCIDR(p netip.Prefix) (*index.Client, int) {
	for bits, nodes := range t.cidrs {
		if p.Bits() < bits {
			continue // p spans more than one pod CIDR
		}
		if c := nodes[netip.PrefixFrom(p.Addr(), bits).Masked()]; c != nil {
			return c, bits
		}
	}
	return nil, 0
}

// watchNodes keeps the node table current: a Node's name, addresses, pod CIDRs and the labels of
// the topology keys, nothing else of it.
func (c *Clients) watchNodes(ctx context.Context, client kubernetes.Interface, synced func()) {
	inf := informers.NewSharedInformerFactoryWithOptions(client, 0).Core().V1().Nodes().Informer()
	_ = inf.SetTransform(c.slimNode)
	inform(ctx, synced, inf, "Nodes", nodeChanged, func(store cache.Store) {
		t := &nodeTable{byAddr: map[netip.Addr]*index.Client{}, byName: map[string]*index.Client{}, cidrs: map[int]map[netip.Prefix]*index.Client{}}
		for _, o := range store.List() {
			n := o.(*corev1.Node)
			client := &index.Client{Node: n.Name, Labels: n.Labels}
			t.byName[n.Name] = client
			for _, a := range n.Status.Addresses {
				if ip, err := netip.ParseAddr(a.Address); err == nil {
					t.byAddr[ip.Unmap()] = client
				}
			}
			for _, cidr := range n.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(cidr); err == nil {
					if t.cidrs[p.Bits()] == nil {
						t.cidrs[p.Bits()] = map[netip.Prefix]*index.Client{}
					}
					t.cidrs[p.Bits()][p.Masked()] = client
				}
			}
		}
		c.nodes.Store(t)
	})
}

// slimNode keeps of a Node what a client's place is made of.
func (c *Clients) slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a deletion's last state
	}
	labels := map[string]string{}
	for _, k := range c.keys {
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
