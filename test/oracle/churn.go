package oracle

import (
	"fmt"
	"maps"
	"slices"
)

// Step makes one change to the world, and returns what it was.
func (r *Random) Step() string {
	for {
		if what := r.change(); what != "" {
			return what
		}
	}
}

// change makes one change of a random kind, "" when none of that kind applies now.
func (r *Random) change() string {
	switch r.rng.IntN(20) {
	case 0:
		return r.addService()
	case 1:
		return r.removeService()
	case 2, 3, 4:
		return r.editEndpoint()
	case 5:
		return r.addEndpoint()
	case 6:
		return r.flipGateway()
	case 7:
		return r.export()
	case 8:
		return r.mirror()
	case 9:
		return r.renamePort()
	case 10:
		r.relink()
		return fmt.Sprintf("Links now name %v (nil: no Link CRD)", sortedKeys(r.W.Linked))
	case 11:
		c := linkable[r.rng.IntN(len(linkable))]
		r.relocate(c)
		return fmt.Sprintf("cluster %s now at %v", c, r.W.Locality[c])
	case 12:
		return r.replaceNode()
	case 13:
		return r.collectPods()
	case 14:
		return r.bigChange()
	default:
		return r.editEndpoint()
	}
}

func sortedKeys(m map[string]bool) []string {
	if m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(m))
}

// pickService returns a random service, nil when there is none.
func (r *Random) pickService() *Service {
	if len(r.W.Services) == 0 {
		return nil
	}
	return r.W.Services[r.rng.IntN(len(r.W.Services))]
}

// pickSlice returns a random slice of a random member of s: the member and the slice's index.
func (r *Random) pickSlice(s *Service) (*Member, int) {
	if s == nil || len(s.Members) == 0 {
		return nil, -1
	}
	m := s.Members[r.rng.IntN(len(s.Members))]
	if len(m.Slices) == 0 {
		return m, -1
	}
	return m, r.rng.IntN(len(m.Slices))
}

// cloned replaces slice i of m with a copy, and returns it: changes are made to copies.
func cloned(m *Member, i int) *Slice {
	sl := &Slice{Ports: m.Slices[i].Ports, Endpoints: slices.Clone(m.Slices[i].Endpoints)}
	m.Slices[i] = sl
	return sl
}

func (r *Random) removeService() string {
	if len(r.W.Services) < 3 {
		return ""
	}
	i := r.rng.IntN(len(r.W.Services))
	s := r.W.Services[i]
	r.W.Services = slices.Delete(r.W.Services, i, i+1)
	return fmt.Sprintf("service %s/%s deleted", s.Namespace, s.Name)
}

// editEndpoint flips an endpoint's readiness, or moves a local one to another zone.
func (r *Random) editEndpoint() string {
	s := r.pickService()
	m, i := r.pickSlice(s)
	if i < 0 || len(m.Slices[i].Endpoints) == 0 {
		return ""
	}
	sl := cloned(m, i)
	j := r.rng.IntN(len(sl.Endpoints))
	e := *sl.Endpoints[j]
	sl.Endpoints[j] = &e
	if m.Cluster == "" && r.rng.IntN(4) == 0 {
		e.Zone = zones[r.rng.IntN(len(zones))]
		return fmt.Sprintf("%s/%s %s: %s now in zone %s", s.Namespace, s.Name, m.Name, e.Host, e.Zone)
	}
	e.Ready = !e.Ready
	return fmt.Sprintf("%s/%s %s: %s ready=%t", s.Namespace, s.Name, m.Name, e.Host, e.Ready)
}

// addEndpoint adds an endpoint to a slice, or removes one.
func (r *Random) addEndpoint() string {
	s := r.pickService()
	m, i := r.pickSlice(s)
	if i < 0 {
		return ""
	}
	sl := cloned(m, i)
	if n := len(sl.Endpoints); n > 0 && r.rng.IntN(2) == 0 {
		j := r.rng.IntN(n)
		host := sl.Endpoints[j].Host
		sl.Endpoints = slices.Delete(sl.Endpoints, j, j+1)
		return fmt.Sprintf("%s/%s %s: %s gone", s.Namespace, s.Name, m.Name, host)
	}
	var e *Endpoint
	if m.Cluster == "" {
		e = r.endpoint(r.W.Nodes[r.rng.IntN(len(r.W.Nodes))].Name)
	} else {
		e = &Endpoint{Host: fmt.Sprintf("%s-%d", s.Name, len(sl.Endpoints)+r.rng.IntN(9)*10), Ready: true}
		for slices.ContainsFunc(sl.Endpoints, func(o *Endpoint) bool { return o.Host == e.Host }) {
			e.Host += "x"
		}
		e.Addr = r.familyAddr(false)
	}
	if len(sl.Endpoints) > 0 && sl.Endpoints[0].Addr.Is6() != e.Addr.Is6() {
		e.Addr = r.familyAddr(sl.Endpoints[0].Addr.Is6())
	}
	sl.Endpoints = append(sl.Endpoints, e)
	return fmt.Sprintf("%s/%s %s: %s at %s added, ready=%t", s.Namespace, s.Name, m.Name, e.Host, e.Addr, e.Ready)
}

// flipGateway marks a mirror endpoint's per-pod mirror up, down, or gone.
func (r *Random) flipGateway() string {
	s := r.pickService()
	m, i := r.pickSlice(s)
	if i < 0 || m.Cluster == "" || len(m.Slices[i].Endpoints) == 0 {
		return ""
	}
	sl := cloned(m, i)
	j := r.rng.IntN(len(sl.Endpoints))
	e := *sl.Endpoints[j]
	sl.Endpoints[j] = &e
	switch {
	case e.Gateway == nil:
		up := r.rng.IntN(2) == 0
		e.Gateway = &up
	case r.rng.IntN(3) == 0:
		e.Gateway = nil
	default:
		up := !*e.Gateway
		e.Gateway = &up
	}
	return fmt.Sprintf("%s/%s %s: %s gateway %v", s.Namespace, s.Name, m.Name, e.Host, describeGateway(e.Gateway))
}

func describeGateway(g *bool) string {
	if g == nil {
		return "unknown"
	}
	return map[bool]string{true: "up", false: "down"}[*g]
}

// export exports a service's local Service, or stops exporting it.
func (r *Random) export() string {
	s := r.pickService()
	if s == nil {
		return ""
	}
	if i := slices.IndexFunc(s.Members, func(m *Member) bool { return m.Cluster == "" }); i >= 0 {
		s.Members = slices.Delete(s.Members, i, i+1)
		return fmt.Sprintf("%s/%s local Service no longer exported", s.Namespace, s.Name)
	}
	s.Members = append(s.Members, r.local())
	return fmt.Sprintf("%s/%s local Service exported: %s", s.Namespace, s.Name, describeMembers(s))
}

// mirror adds a mirror to a service, or deletes one.
func (r *Random) mirror() string {
	s := r.pickService()
	if s == nil {
		return ""
	}
	if i := slices.IndexFunc(s.Members, func(m *Member) bool { return m.Cluster != "" }); i >= 0 && r.rng.IntN(2) == 0 {
		m := s.Members[i]
		s.Members = slices.Delete(s.Members, i, i+1)
		return fmt.Sprintf("%s/%s mirror %s deleted", s.Namespace, s.Name, m.Name)
	}
	r.addMirror(s)
	return fmt.Sprintf("%s/%s mirrors now %s", s.Namespace, s.Name, describeMembers(s))
}

// renamePort renames a port of a local slice, or changes a mirror Service's ports (a new Service).
func (r *Random) renamePort() string {
	s := r.pickService()
	m, i := r.pickSlice(s)
	if i < 0 {
		return ""
	}
	// A port's new name is one no other port has: names are unique in a Service and a slice.
	rename := func(ps []Port) []Port {
		out := slices.Clone(ps)
		for _, name := range []string{"db", "http", "dns", "web"} {
			if len(out) > 0 && !slices.ContainsFunc(out, func(p Port) bool { return p.Name == name }) {
				out[0].Name = name
				break
			}
		}
		return out
	}
	if m.Cluster == "" {
		sl := cloned(m, i)
		sl.Ports = rename(sl.Ports)
		return fmt.Sprintf("%s/%s local slice ports now %v", s.Namespace, s.Name, sl.Ports)
	}
	n := *m
	n.Ports = rename(m.Ports)
	s.Members[slices.Index(s.Members, m)] = &n
	return fmt.Sprintf("%s/%s %s ports now %v", s.Namespace, s.Name, m.Name, n.Ports)
}

// replaceNode deletes a Node and gives its pod CIDR to a new one; its Pods and endpoints stay
// until collectPods.
func (r *Random) replaceNode() string {
	if len(r.W.Nodes) < 3 {
		return ""
	}
	i := r.rng.IntN(len(r.W.Nodes))
	old := r.W.Nodes[i]
	r.W.Nodes = slices.Delete(r.W.Nodes, i, i+1)
	n := r.addNode(zones[r.rng.IntN(3)], old.CIDRs[0])
	return fmt.Sprintf("Node %s deleted, its pod CIDR %s given to new Node %s (%s)", old.Name, old.CIDRs[0], n.Name, n.Labels[Zone])
}

// collectPods deletes the Pods of Nodes gone, and their endpoints; or adds a client Pod.
func (r *Random) collectPods() string {
	gone := func(node string) bool { return r.W.node(node) == nil }
	if !slices.ContainsFunc(r.W.Pods, func(p *Pod) bool { return gone(p.Node) }) {
		node := r.W.Nodes[r.rng.IntN(len(r.W.Nodes))].Name
		r.addPod(node)
		return "a client Pod on " + node
	}
	r.W.Pods = slices.DeleteFunc(r.W.Pods, func(p *Pod) bool { return gone(p.Node) })
	for _, s := range r.W.Services {
		for _, m := range s.Members {
			for i := range m.Slices {
				if m.Cluster == "" && slices.ContainsFunc(m.Slices[i].Endpoints, func(e *Endpoint) bool { return gone(e.Node) }) {
					sl := cloned(m, i)
					sl.Endpoints = slices.DeleteFunc(sl.Endpoints, func(e *Endpoint) bool { return gone(e.Node) })
				}
			}
		}
	}
	return "the Pods of deleted Nodes deleted, and their endpoints"
}

// bigChange grows or shrinks a big service by a slice, or flips a tenth of a slice's readiness.
func (r *Random) bigChange() string {
	i := slices.IndexFunc(r.W.Services, func(s *Service) bool {
		return len(s.Members) > 0 && s.Members[0].Cluster == "" && len(s.Members[0].Slices) > 2
	})
	if i < 0 {
		return ""
	}
	s, m := r.W.Services[i], r.W.Services[i].Members[0]
	switch r.rng.IntN(3) {
	case 0:
		m.Slices = slices.Delete(slices.Clone(m.Slices), len(m.Slices)-1, len(m.Slices))
		return fmt.Sprintf("%s/%s: a slice of the big service deleted", s.Namespace, s.Name)
	case 1:
		b := r.bigLocal(100)
		m.Slices = append(slices.Clone(m.Slices), b.Slices...)
		return fmt.Sprintf("%s/%s: a slice of 100 added to the big service", s.Namespace, s.Name)
	}
	j := r.rng.IntN(len(m.Slices))
	sl := cloned(m, j)
	for k := range sl.Endpoints {
		if r.rng.IntN(10) == 0 {
			e := *sl.Endpoints[k]
			e.Ready = !e.Ready
			sl.Endpoints[k] = &e
		}
	}
	return fmt.Sprintf("%s/%s: readiness of a tenth of slice %d flipped", s.Namespace, s.Name, j)
}
