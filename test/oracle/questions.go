package oracle

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Question returns a random question of the world: of its services mostly, in every form of
// name, type and transport, from every kind of client, in mixed case now and then.
func (r *Random) Question() Question {
	rng := r.rng
	q := Question{Zone: r.W.Zones[rng.IntN(len(r.W.Zones))], Type: []uint16{dns.TypeA, dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeSRV, dns.TypeTXT}[rng.IntN(6)]}
	s := r.pickService()
	q.Svc, q.NS = services[rng.IntN(len(services))], namespaces[rng.IntN(len(namespaces))]
	if s != nil && rng.IntN(10) > 0 {
		q.Svc, q.NS = s.Name, s.Namespace
	}
	if rng.IntN(5) == 0 {
		q.NS = "" // a short name
		if rng.IntN(4) == 0 {
			q.Svc = namespaces[rng.IntN(len(namespaces))] // maybe a namespace's
		}
	}
	switch f := rng.IntN(10); {
	case f < 6:
		r.scope(&q, s)
	case f < 9:
		q.Form = FormSRV
		p := portsOf[rng.IntN(len(portsOf))]
		q.Port, q.Proto = p.Name, strings.ToLower(p.Protocol)
		if rng.IntN(5) == 0 {
			q.Port, q.Proto = []string{"db", "http", "dns", "nope"}[rng.IntN(4)], []string{"tcp", "udp"}[rng.IntN(2)]
		}
	default:
		q.Form, q.Proto = FormProto, []string{"tcp", "udp", "sctp"}[rng.IntN(3)]
	}
	if rng.IntN(6) == 0 {
		q.Zonal, q.TopoZone = []string{"pin", "prefer"}[rng.IntN(2)], []string{"za", "zb", "zc", "zx", "zq", "ZA"}[rng.IntN(6)]
	}
	q.Size = []int{512, 1232, 4096, 0}[rng.IntN(4)]
	r.asker(&q)
	if rng.IntN(3) == 0 {
		q.Case = rng.Uint64() | 1
	}
	return q
}

// scope makes q a name of service s, of one of its clusters, or of one of its pods (with a
// namespace: short names have no such forms).
func (r *Random) scope(q *Question, s *Service) {
	if q.NS == "" || s == nil || len(s.Members) == 0 {
		return
	}
	m := s.Members[r.rng.IntN(len(s.Members))]
	cluster := m.Cluster
	if cluster == "" {
		cluster = r.W.Cluster
	}
	switch r.rng.IntN(5) {
	case 0:
		q.Cluster = cluster
	case 1:
		q.Cluster = cluster
		for _, sl := range m.Slices {
			if len(sl.Endpoints) > 0 {
				q.Host = sl.Endpoints[r.rng.IntN(len(sl.Endpoints))].Host
			}
		}
		if q.Host == "" {
			q.Host = "nobody"
		}
	}
}

// asker sends q from a random client: an unknown address, a Node's, a Pod's, a forwarder's, or a
// source of client_ecs_from with an ECS option of a Node's or a Pod's address, or of a pod CIDR.
func (r *Random) asker(q *Question) {
	rng := r.rng
	q.From = netip.MustParseAddr("127.0.0.1")
	switch rng.IntN(6) {
	case 1:
		n := r.W.Nodes[rng.IntN(len(r.W.Nodes))]
		q.From = n.Addrs[0]
	case 2, 3:
		if len(r.W.Pods) > 0 {
			q.From = r.W.Pods[rng.IntN(len(r.W.Pods))].IP
		}
	case 4:
		q.From = r.W.Forwarders[0]
	case 5:
		q.From = r.W.ECSFrom[0].Addr()
		switch n := r.W.Nodes[rng.IntN(len(r.W.Nodes))]; rng.IntN(3) {
		case 0:
			q.ECS = netip.PrefixFrom(n.Addrs[0], 32)
		case 1:
			q.ECS = n.CIDRs[0]
		default:
			if len(r.W.Pods) > 0 {
				ip := r.W.Pods[rng.IntN(len(r.W.Pods))].IP
				q.ECS = netip.PrefixFrom(ip, ip.BitLen())
			}
		}
	}
}
