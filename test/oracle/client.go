package oracle

import (
	"net/netip"
	"slices"
)

// client returns the Node of who asks q, nil when answers are the cluster's view
// (client_locality): from an ECS option a source of client_ecs_from sent, its address a Node's,
// a Pod's (with pod) or in a Node's pod CIDR; else, unless the source is a forwarder's, the source
// address: a Node's (node), a Pod's (pod). Where clients run is named only where it is sure: an
// address two Nodes give, pod CIDRs that overlap, a Pod IP that Pods on two Nodes have, or a Pod
// whose Node is gone, locate no one.
func (w *World) client(q Question) *Node {
	has := func(source string) bool { return slices.Contains(w.ClientLocality, source) }
	if has("ecs") && q.ECS.IsValid() && slices.ContainsFunc(w.ECSFrom, func(p netip.Prefix) bool { return p.Contains(q.From) }) {
		p := q.ECS.Masked()
		if n := w.nodeAt(p.Addr()); p.IsSingleIP() && n != nil {
			return n
		}
		if n := w.podAt(p, has("pod")); n != nil {
			return n
		}
	}
	if slices.Contains(w.Forwarders, q.From) {
		return nil
	}
	if n := w.nodeAt(q.From); has("node") && n != nil {
		return n
	}
	if has("pod") {
		return w.podAt(netip.PrefixFrom(q.From, q.From.BitLen()), true)
	}
	return nil
}

// nodeAt returns the Node whose address a is, nil for none or when two give it.
func (w *World) nodeAt(a netip.Addr) *Node {
	var found []*Node
	for _, n := range w.Nodes {
		if slices.Contains(n.Addrs, a) {
			found = append(found, n)
		}
	}
	if len(found) != 1 {
		return nil
	}
	return found[0]
}

// podAt returns the Node of the clients of prefix p: of the Pod at its address when p is one
// address and pods are known, else of the pod CIDR that holds p, which no other Node's overlaps.
func (w *World) podAt(p netip.Prefix, pods bool) *Node {
	if pods && p.IsSingleIP() {
		var on []string
		for _, pod := range w.Pods {
			if pod.IP == p.Addr() && !slices.Contains(on, pod.Node) {
				on = append(on, pod.Node)
			}
		}
		switch len(on) {
		case 0:
		case 1:
			return w.node(on[0])
		default:
			return nil
		}
	}
	var in *Node
	for _, n := range w.Nodes {
		for _, c := range n.CIDRs {
			if c.Bits() <= p.Bits() && c.Contains(p.Addr()) && !w.overlapped(n, c) {
				in = n
			}
		}
	}
	return in
}

// node returns the Node called name, nil for none.
func (w *World) node(name string) *Node {
	for _, n := range w.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// overlapped reports whether pod CIDR c of n overlaps another Node's.
func (w *World) overlapped(n *Node, c netip.Prefix) bool {
	for _, o := range w.Nodes {
		if o != n && slices.ContainsFunc(o.CIDRs, c.Overlaps) {
			return true
		}
	}
	return false
}
