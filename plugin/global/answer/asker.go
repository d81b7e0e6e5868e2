package answer

import (
	"net"
	"net/netip"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"

	"github.com/miekg/dns"
)

// Answers ranked from the client (`client_locality`): who asks is learned from the query, and
// where it runs from this cluster's Nodes and Pods (watch.Clients).

// Querier is who asks, when the answer is ranked from the client: where it runs, and how that
// was learned (client_locality's source: ecs, node or pod). A nil client is the cluster's view:
// learned is "" without client_locality, "none" when no source told.
type Querier struct {
	client  *index.Client
	learned string
}

// Client sources, as client_locality names them and explanations say them.
const (
	sourceECS  = contract.SourceECS
	sourceNode = contract.SourceNode
	sourcePod  = contract.SourcePod
	sourceNone = "none" // no source told: the cluster's view
)

// Locator finds where clients run: the node of a Node's address, of a Pod's IP (or of an address
// in a Node's pod CIDRs), and the addresses of forwarders, whose queries are every client's.
type Locator interface {
	// Node returns the client at a Node's address, nil for none.
	Node(a netip.Addr) *index.Client
	// Pod returns the client at pod prefix p (a Pod's IP when p is a single address, else a
	// prefix within a Node's pod CIDRs), nil for none, and the prefix length the answer holds
	// for: every address of a Node's pod CIDR runs on that node.
	Pod(p netip.Prefix) (*index.Client, int)
	// Forwarder reports whether a is a forwarder's address (the cluster DNS's pods).
	Forwarder(a netip.Addr) bool
	// ECSSource reports whether a is the address of a pod of a Service of client_ecs_from.
	ECSSource(a netip.Addr) bool
}

// Asker learns who asks a query (client_locality): the options that say how, and the table of
// where clients run that it asks.
type Asker struct {
	Sources contract.Sources // client_locality: how clients are learned
	ECSFrom Networks         // client_ecs_from's networks: sources whose ECS option is taken
	Locator Locator          // clients (watch.Clients), built; nil without client_locality
}

// WhoAsks learns who asks query r, received on w: from its ECS option when a source of
// client_ecs_from sent it, else from its source address (unless a forwarder's). It
// returns the ECS option of the reply, when client_locality has ecs and such a source sent one:
// with the scope the answer depends on (RFC 7871 7.2.1), so that caches honouring ECS keep it
// apart. Without client_locality it does nothing.
func (a *Asker) WhoAsks(w dns.ResponseWriter, r *dns.Msg) (q Querier, ecs *dns.EDNS0_SUBNET) {
	if a.Locator == nil {
		return q, nil
	}
	q.learned = sourceNone
	src, ok := remoteAddr(w)
	if !ok {
		return q, nil
	}
	// The option is a claim of who asks: taken only from the sources trusted to make it
	// (client_ecs_from: resolvers that set it to their client's address and share no cache), else
	// anyone could be answered as any node, and learn where every address runs; nor from the
	// forwarders, whose shared cache would serve one client's answer to all.
	if a.Sources.ECS && (a.ECSFrom.has(src) || a.Locator.ECSSource(src)) {
		if ecs = subnetOf(r); ecs != nil {
			// Until known, the answer holds for the address the client gave, no wider.
			echo := *ecs
			echo.SourceScope = ecs.SourceNetmask
			if p, ok := prefixOf(ecs); ok {
				if c, scope := a.locate(p); c != nil {
					echo.SourceScope = uint8(scope)
					return Querier{client: c, learned: sourceECS}, &echo
				}
			}
			ecs = &echo
		}
	}
	q, _ = a.bySource(src)
	return q, ecs
}

// bySource is who asks from address src: no one known for a forwarder's (its shared cache would
// serve one client's answer to all), else a Node's or a Pod's; known says src is one of these.
func (a *Asker) bySource(src netip.Addr) (q Querier, known bool) {
	q.learned = sourceNone
	if a.Locator.Forwarder(src) {
		return q, true
	}
	if a.Sources.Node {
		if c := a.Locator.Node(src); c != nil {
			return Querier{client: c, learned: sourceNode}, true
		}
	}
	if a.Sources.Pod {
		if c, _ := a.Locator.Pod(netip.PrefixFrom(src, src.BitLen())); c != nil {
			return Querier{client: c, learned: sourcePod}, true
		}
	}
	return q, false
}

// ExplainedAs is whom an explanation is of when its asker, one explain_from trusts, gives an ECS
// option (linkerd global explain --from): the client at that address, as its own query would be
// answered (from a forwarder's, a Node's or a Pod's address), else as a query a trusted resolver
// (client_ecs_from) sends for it would be. Without such an option, q and ecs as they are.
//
//go:noinline
func (a *Asker) ExplainedAs(r *dns.Msg, q Querier, ecs *dns.EDNS0_SUBNET) (Querier, *dns.EDNS0_SUBNET) {
	opt := subnetOf(r)
	if a.Locator == nil || opt == nil {
		return q, ecs
	}
	p, ok := prefixOf(opt)
	if !ok {
		return q, ecs
	}
	if p.IsSingleIP() {
		if q, known := a.bySource(p.Addr()); known {
			return q, nil
		}
	}
	if a.Sources.ECS {
		if c, _ := a.locate(p); c != nil {
			return Querier{client: c, learned: sourceECS}, nil
		}
	}
	return Querier{learned: sourceNone}, nil
}

// Networks are address prefixes an option trusts (client_ecs_from, explain_from).
type Networks []netip.Prefix

// has reports whether a is in one of ns.
func (ns Networks) has(a netip.Addr) bool {
	for _, p := range ns {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// locate finds the client of an ECS prefix: a Node's address, else a Pod's, with the prefix
// length its answer holds for.
func (a *Asker) locate(p netip.Prefix) (*index.Client, int) {
	if p.IsSingleIP() {
		if c := a.Locator.Node(p.Addr()); c != nil {
			return c, p.Bits()
		}
	}
	return a.Locator.Pod(p)
}

// subnetOf returns the query's ECS option, nil for none.
func subnetOf(r *dns.Msg) *dns.EDNS0_SUBNET {
	o := r.IsEdns0()
	if o == nil {
		return nil
	}
	for _, opt := range o.Option {
		if e, ok := opt.(*dns.EDNS0_SUBNET); ok {
			return e
		}
	}
	return nil
}

// prefixOf is the address prefix an ECS option gives; ok is false for a malformed one.
func prefixOf(e *dns.EDNS0_SUBNET) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(e.Address)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	if (e.Family == 1) != a.Is4() || int(e.SourceNetmask) > a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, int(e.SourceNetmask)).Masked(), true
}

// remoteAddr is the query's source address, without allocating (request.Request's IP formats
// and parses it again).
func remoteAddr(w dns.ResponseWriter) (netip.Addr, bool) {
	var ip net.IP
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	default:
		return netip.Addr{}, false
	}
	addr, ok := netip.AddrFromSlice(ip)
	return addr.Unmap(), ok
}

// SetSubnet puts the ECS option of the reply into m's OPT record, made like the request's.
func SetSubnet(req, m *dns.Msg, ecs *dns.EDNS0_SUBNET) {
	if m.IsEdns0() == nil {
		o := req.IsEdns0()
		m.SetEdns0(o.UDPSize(), o.Do())
	}
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, ecs)
}
