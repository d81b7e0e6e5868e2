// Package oracle says what the plugin must answer, from plugin/global/README.md alone (its
// Description, Syntax and Names), for a world of clusters described as plainly as the README
// describes it. It shares no code with the plugin on purpose: a bug there must not be copied here.
// The plugin's randomized checks (plugin/global's TestDifferential) compare every answer of
// ServeDNS with what Expect says of the same world.
package oracle

import (
	"net/netip"
	"slices"
	"strings"
)

// World is what the plugin answers from: the Corefile's options, this cluster's and its linked
// clusters' places, their global services' members, and where clients run.
type World struct {
	Options

	Cluster  string                       // this cluster's name (`cluster`)
	Locality map[string]map[string]string // cluster -> locality label -> value, this one's too
	// Linked are the clusters Linkerd's Links name; nil: the API serves no Links (any cluster's
	// mirror may be a member). An empty set: Links served but none read, or none.
	Linked   map[string]bool
	Services []*Service

	Nodes      []*Node
	Pods       []*Pod
	Forwarders []netip.Addr // the addresses of client_forwarders' pods
}

// Options are the Corefile's options the world is answered under.
type Options struct {
	Zones            []string       // the plugin's zones, lower case, fully qualified
	TTL              uint32         // ttl
	Rotate           bool           // rotate
	Keys             []string       // topology: locality keys, most specific first
	ClientKeys       []string       // the keys of answers ranked from a known client
	Policies         map[string]int // policy nearest N by zone ("": the instance's); 0 or none: all
	PreferNamespaces []string       // prefer_namespaces
	ClientLocality   []string       // client_locality: ecs, node, pod, in order
	ECSFrom          []netip.Prefix // client_ecs_from's networks
}

// The well-known locality keys, as `zone` and `region` stand for them, and the two words of the
// client keys.
const (
	Zone     = "topology.kubernetes.io/zone"
	Region   = "topology.kubernetes.io/region"
	Hostname = "kubernetes.io/hostname"
	InThis   = "cluster"
)

// Service is a global service's name and its member Services, accepted or not.
type Service struct {
	Namespace, Name string
	Members         []*Member
}

// Member is a Service that claims to be a member: the local one (Cluster "") or a headless
// mirror named Name, labelled with Cluster.
type Member struct {
	Name    string
	Cluster string // "": this cluster's Service
	Ports   []Port // a mirror Service's ports, what clients dial; unused for the local one
	Slices  []*Slice
}

// Slice is one EndpointSlice of a member: its ports (a mirror's: the remote target ports) and
// endpoints.
type Slice struct {
	Ports     []Port
	Endpoints []*Endpoint
}

// Port is a named port.
type Port struct {
	Name     string
	Port     int32
	Protocol string // TCP, UDP, SCTP
}

// Endpoint is one endpoint of a slice.
type Endpoint struct {
	Host  string
	Addr  netip.Addr
	Ready bool
	Node  string // a local pod's node, "" for none
	Zone  string // a local endpoint's slice zone, "" for none
	// Gateway is a mirror endpoint's per-pod mirror: nil for none (the headless mirror's
	// readiness holds), else whether it is ready, which Linkerd's gateway probe decides.
	Gateway *bool
}

// Node is a Node of this cluster.
type Node struct {
	Name   string
	Labels map[string]string
	Addrs  []netip.Addr
	CIDRs  []netip.Prefix
}

// Pod is a Pod of this cluster, a client: its IP and its Node.
type Pod struct {
	IP   netip.Addr
	Node string
}

// record is one member endpoint as an answer holds it.
type record struct {
	cluster, host string
	addr          netip.Addr
	ready         bool
	local         bool
	node, zone    string         // a local pod's node and slice zone; a mirror's: its cluster's zone
	ports         map[Port]int32 // named port (name, protocol) -> the port an SRV record gives
}

// members returns s's accepted members (Description): the local Service, and one headless mirror
// per linked cluster, none claiming this cluster's name; of two claiming one cluster, the one named
// <svc>-<cluster>.
func (w *World) members(s *Service) []*Member {
	var out []*Member
	for _, m := range s.Members {
		switch {
		case m.Cluster == "":
			out = append(out, m)
		case m.Cluster == w.Cluster:
		case w.Linked != nil && !w.Linked[m.Cluster]:
		default:
			i := slices.IndexFunc(out, func(o *Member) bool { return o.Cluster == m.Cluster })
			if i < 0 {
				out = append(out, m)
			} else if m.Name == s.Name+"-"+m.Cluster {
				out[i] = m
			}
		}
	}
	return out
}

// records returns the records of s's accepted members.
func (w *World) records(s *Service) []record {
	var out []record
	for _, m := range w.members(s) {
		for _, sl := range m.Slices {
			ports := map[Port]int32{}
			for _, p := range sl.Ports {
				if m.Cluster == "" {
					ports[Port{Name: p.Name, Protocol: p.Protocol}] = p.Port
					continue
				}
				// Ports: a mirror's SRV port is its Service's port of that name.
				if i := slices.IndexFunc(m.Ports, func(sp Port) bool { return sp.Name == p.Name }); i >= 0 {
					ports[Port{Name: p.Name, Protocol: m.Ports[i].Protocol}] = m.Ports[i].Port
				}
			}
			for _, e := range sl.Endpoints {
				r := record{cluster: m.Cluster, host: e.Host, addr: e.Addr, ready: e.Ready, ports: ports, local: m.Cluster == ""}
				if r.local {
					r.cluster, r.node, r.zone = w.Cluster, e.Node, e.Zone
				} else {
					r.zone = w.Locality[m.Cluster][Zone]
					if e.Gateway != nil {
						r.ready = *e.Gateway
					}
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// tier is r's tier from the cluster (Names, Order): 0 for this cluster; for a linked one, i for
// the first key Ki on which its locality equals this cluster's, n+1 for none.
func (w *World) tier(r record) int {
	if r.local {
		return 0
	}
	here, there := w.Locality[w.Cluster], w.Locality[r.cluster]
	for i, k := range w.Keys {
		if v, ok := here[k]; ok && v != "" && there[k] == v {
			return i + 1
		}
	}
	return len(w.Keys) + 1
}

// clientTier is r's tier from client node n (client_locality): i for the first client key it
// shares with the client (its node, its zone, this cluster, its region), n for none.
func (w *World) clientTier(r record, n *Node) int {
	for i, k := range w.ClientKeys {
		var shares bool
		switch k {
		case Hostname:
			shares = r.local && r.node != "" && r.node == n.Name
		case InThis:
			shares = r.local
		case Zone:
			shares = r.zone != "" && r.zone == n.Labels[Zone]
		default:
			v := w.Locality[r.cluster][k]
			if r.local {
				v = w.Locality[w.Cluster][k]
			}
			shares = v != "" && v == n.Labels[k]
		}
		if shares {
			return i
		}
	}
	return len(w.ClientKeys)
}

// service returns the global service ns/name, nil when it has no accepted member.
func (w *World) service(ns, name string) *Service {
	for _, s := range w.Services {
		if strings.EqualFold(s.Namespace, ns) && strings.EqualFold(s.Name, name) && len(w.members(s)) > 0 {
			return s
		}
	}
	return nil
}

// named returns the global services called name, in any namespace.
func (w *World) named(name string) []*Service {
	var out []*Service
	for _, s := range w.Services {
		if strings.EqualFold(s.Name, name) && len(w.members(s)) > 0 {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *Service) int { return strings.Compare(a.Namespace, b.Namespace) })
	return out
}

// answers reports whether s has a ready record.
func (w *World) answers(s *Service) bool {
	return slices.ContainsFunc(w.records(s), func(r record) bool { return r.ready })
}

// namespaceAnswers reports whether a global service of namespace ns answers.
func (w *World) namespaceAnswers(ns string) bool {
	return slices.ContainsFunc(w.Services, func(s *Service) bool {
		return strings.EqualFold(s.Namespace, ns) && len(w.members(s)) > 0 && w.answers(s)
	})
}
