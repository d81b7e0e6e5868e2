package watch

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/index"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// The EndpointSlices of the member Services, local and headless mirrors (the per-pod mirrors'
// are in podmirrors.go).

// DeepCopyObject implements runtime.Object: the stored objects are never mutated, so a shallow
// copy is a deep copy.
func (s *slice) DeepCopyObject() runtime.Object { c := *s; return &c }

// convertSlice reduces an EndpointSlice to an index.Slice; nil when the whole slice is unusable.
// A mirror's endpoint without a hostname is left out (counted in Unnamed): Linkerd mirrors only
// pods with hostnames into a headless mirror (cluster_watcher_headless.go
// createOrUpdateHeadlessEndpoints), and on a change of the remote Service it writes the gateway's
// address there, without one, as into a ClusterIP mirror (cluster_watcher.go
// handleRemoteExportedServiceUpdated; handleRemoteServiceUpdated in 2.14); the index warns of it
// for headless mirrors (a ClusterIP mirror's slices, kept with theirs, have no other endpoints,
// and are members of nothing).
func convertSlice(es *discoveryv1.EndpointSlice, mirror bool, p *problems) *index.Slice {
	var fam index.Family
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4:
		fam = index.IPv4
	case discoveryv1.AddressTypeIPv6:
		fam = index.IPv6
	default:
		p.add(ReasonFQDNSlice, "address type "+quote(string(es.AddressType)))
		return nil
	}
	out := &index.Slice{Family: fam, Endpoints: make([]index.Endpoint, 0, len(es.Endpoints))}
	out.Ports = convertPorts(es.Ports, p)
	for i := range es.Endpoints {
		e := &es.Endpoints[i]
		ready := ptr.Deref(e.Conditions.Ready, true) // nil means ready, as in Kubernetes
		ep := index.Endpoint{
			Ready: ready,
			// Without a serving condition (the mirroring controller sets none), serving is ready.
			Serving:     ptr.Deref(e.Conditions.Serving, ready),
			Terminating: ptr.Deref(e.Conditions.Terminating, false),
		}
		if e.Zone != nil || e.NodeName != nil || e.TargetRef != nil {
			// A cluster's zones and nodes are few, each the place of many endpoints: one copy.
			zone, node := ptr.Deref(e.Zone, ""), ptr.Deref(e.NodeName, "")
			ep.Local = &index.Placement{Zone: internString(places, zone), NodeName: internString(places, node)}
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				ep.Local.Pod = e.TargetRef.Name
			}
		}
		addr := firstAddr(e.Addresses, fam, p)
		if !addr.IsValid() {
			continue
		}
		ep.SetAddr(addr)
		ep.Host = ptr.Deref(e.Hostname, "")
		if ep.Host != "" && len(validation.IsDNS1123Label(ep.Host)) > 0 {
			p.add(ReasonBadHostname, "hostname "+quote(ep.Host)+" is not a DNS label: taken as none")
			ep.Host = ""
		}
		switch {
		case ep.Host == "" && mirror:
			out.Unnamed++
			continue
		case ep.Host == "":
			ep.Host = dashed(addr)
		}
		if ep.Local != nil && ep.Local.Pod == ep.Host {
			ep.Local.Pod = ep.Host // a StatefulSet's pod is its hostname: one copy
		}
		out.Endpoints = append(out.Endpoints, ep)
	}
	return out
}

// convertPorts keeps the ports that have a number, the first maxPorts.
func convertPorts(ps []discoveryv1.EndpointPort, p *problems) []index.Port {
	if len(ps) > maxPorts {
		p.add(ReasonTooManyPorts, fmt.Sprintf("%d ports: the first %d kept", len(ps), maxPorts))
		ps = ps[:maxPorts]
	}
	var out []index.Port
	for _, sp := range ps {
		if sp.Port == nil {
			p.add(ReasonPortWithoutNumber, "a port without a number")
			continue
		}
		out = append(out, index.Port{Name: ptr.Deref(sp.Name, ""), Port: *sp.Port, Protocol: protocol(ptr.Deref(sp.Protocol, ""))})
	}
	return internPorts(out)
}

// firstAddr is an endpoint's address of family fam; invalid when it has none. Kubernetes
// validates addresses; a cache can still hold anything. An IPv4-mapped IPv6 address would answer
// AAAA for an IPv4 endpoint and name it with dots. Only the first valid address counts, as in
// Kubernetes' own consumers.
func firstAddr(addrs []string, fam index.Family, p *problems) netip.Addr {
	var addr netip.Addr
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" || ip.Is4In6() || (fam == index.IPv4) != ip.Is4() {
			p.add(ReasonBadAddress, "address "+quote(a))
			continue
		}
		if !addr.IsValid() {
			addr = ip
		}
	}
	return addr
}

// dashed is the hostname CoreDNS's kubernetes plugin gives an endpoint without one: 10-244-1-5,
// fd00--1 (with a 0 added where a dash would start or end the label).
func dashed(a netip.Addr) string {
	if a.Is4() {
		return strings.ReplaceAll(a.String(), ".", "-")
	}
	h := strings.ReplaceAll(a.String(), ":", "-")
	if strings.HasSuffix(h, "-") {
		h += "0"
	}
	if strings.HasPrefix(h, "-") {
		h = "0" + h
	}
	return h
}

func (st *feedSlices) add(o *slice) {
	st.byName[nameID(o.name)] = o
	if st.first[o.service] == nil {
		st.first[o.service] = o
	} else {
		st.more[o.service] = append(st.more[o.service], sliceRef{o, o.slice})
	}
}

// replace puts n, of the same name and Service as o, in o's place.
func (st *feedSlices) replace(o, n *slice) {
	st.byName[nameID(n.name)] = n
	if st.first[o.service] == o {
		st.first[o.service] = n
		return
	}
	list := st.more[o.service]
	list[slices.IndexFunc(list, func(r sliceRef) bool { return r.obj == o })] = sliceRef{n, n.slice}
}

func (st *feedSlices) remove(o *slice) {
	delete(st.byName, nameID(o.name))
	if st.first[o.service] != o {
		st.dropMore(o.service, o)
		return
	}
	rest := st.more[o.service]
	if len(rest) == 0 {
		delete(st.first, o.service)
		return
	}
	last := rest[len(rest)-1].obj
	st.first[o.service] = last
	st.dropMore(o.service, last)
}

func (st *feedSlices) dropMore(service string, o *slice) {
	list := slices.DeleteFunc(st.more[service], func(r sliceRef) bool { return r.obj == o })
	if len(list) == 0 {
		delete(st.more, service)
		return
	}
	st.more[service] = list
}

func (sp *namespaceObjects) slicesOf(src feed) *feedSlices {
	if src == fromLocal {
		return &sp.localSlices
	}
	return &sp.mirrorSlices
}

// sliceKey is the global service that a slice of Service name (of feed src) belongs to.
func (sp *namespaceObjects) sliceKey(ns string, src feed, name string) (index.Key, bool) {
	if src == fromLocal {
		return index.Key{Namespace: ns, Name: name}, true
	}
	return sp.mirrorKey(name)
}

// sliceVersion is the version kept of slice name of feed src; 0 for none.
func (sp *namespaceObjects) sliceVersion(src feed, name string) uint64 {
	if e := sp.slicesOf(src).byName[nameID(name)]; e != nil && e.name == name {
		return e.version
	}
	return 0
}

func (sp *namespaceObjects) sliceKeys(src feed, out []objectKey) []objectKey {
	for id := range sp.slicesOf(src).byName {
		out = append(out, objectKey{id: id})
	}
	return out
}

func (sp *namespaceObjects) removeSlice(ns string, src feed, id uint64, c affected) {
	ss := sp.slicesOf(src)
	if o, ok := ss.byName[id]; ok {
		ss.remove(o)
		c.add(sp.sliceKey(ns, src, o.service))
	}
}

func (sp *namespaceObjects) putSlice(src feed, o *slice, c affected) {
	if o.service == "" {
		return
	}
	sp.slicesOf(src).add(o)
	c.add(sp.sliceKey(o.namespace, src, o.service))
}

func (s *objectStore) slices(m *index.Member) []*index.Slice {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sp := s.byNamespace[m.Namespace]
	if sp == nil {
		return nil
	}
	src := fromMirror
	if m.Local() {
		src = fromLocal
	}
	ss := sp.slicesOf(src)
	first, more := ss.first[m.Name], ss.more[m.Name]
	if first == nil {
		return nil
	}
	out := make([]*index.Slice, 0, 1+len(more))
	for _, r := range more {
		if r.slice != nil {
			out = append(out, r.slice)
		}
	}
	if first.slice != nil {
		out = append(out, first.slice)
	}
	return out
}
