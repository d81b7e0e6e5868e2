// Package indextest provides an in-memory index.Source for tests of the index and of its readers.
package indextest

import (
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
)

// Source is an index.Source held in memory. Safe for concurrent use.
type Source struct {
	mu      sync.Mutex
	members map[index.Key][]*index.Member
	slices  map[*index.Member][]*index.Slice
	pods    map[*index.Member][]index.PodMirror
	podGen  map[*index.Member]uint64 // by member, the stamp of its last SetPodMirrors
	stamps  uint64
}

// New returns an empty Source.
func New() *Source {
	return &Source{members: map[index.Key][]*index.Member{}, slices: map[*index.Member][]*index.Slice{}, pods: map[*index.Member][]index.PodMirror{},
		podGen: map[*index.Member]uint64{}}
}

// Add makes m a member of k with the given slices and returns m.
func (s *Source) Add(k index.Key, m *index.Member, slices ...*index.Slice) *index.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[k] = append(s.members[k], m)
	s.slices[m] = slices
	return m
}

// SetSlices replaces the slices of m.
func (s *Source) SetSlices(m *index.Member, slices ...*index.Slice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slices[m] = slices
}

// SetPodMirrors replaces the per-pod mirrors of mirror member m.
func (s *Source) SetPodMirrors(m *index.Member, pods ...index.PodMirror) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[m] = pods
	s.stamps++
	s.podGen[m] = s.stamps
}

// SetPodMirrorsOf gives every endpoint of mirror member m's slices a per-pod mirror, ready when
// ready() says so.
func (s *Source) SetPodMirrorsOf(m *index.Member, ready func() bool) {
	var pods []index.PodMirror
	for _, sl := range s.Slices(m) {
		for _, e := range sl.Endpoints {
			pods = append(pods, index.PodMirror{Addr: e.Addr(), Ready: ready()})
		}
	}
	s.SetPodMirrors(m, pods...)
}

// PodMirror returns the per-pod mirror of address addr, ready or not.
func PodMirror(addr string, ready bool) index.PodMirror {
	return index.PodMirror{Addr: netip.MustParseAddr(addr), Ready: ready}
}

// Remove drops member m of k.
func (s *Source) Remove(k index.Key, m *index.Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.members[k]
	for i := range ms {
		if ms[i] == m {
			s.members[k] = append(ms[:i:i], ms[i+1:]...)
			break
		}
	}
	if len(s.members[k]) == 0 {
		delete(s.members, k)
	}
	delete(s.slices, m)
	delete(s.pods, m)
	delete(s.podGen, m)
}

// Services implements index.Source.
func (s *Source) Services() []index.Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.members))
}

// Members implements index.Source.
func (s *Source) Members(k index.Key) []*index.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*index.Member(nil), s.members[k]...)
}

// Slices implements index.Source.
func (s *Source) Slices(m *index.Member) []*index.Slice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slices[m]
}

// PodMirrors implements index.Source.
func (s *Source) PodMirrors(m *index.Member) []index.PodMirror {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pods[m])
}

// PodMirrorGeneration implements index.Source: every SetPodMirrors of m makes a new one.
func (s *Source) PodMirrorGeneration(m *index.Member) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.podGen[m]
}

// Endpoint returns a ready endpoint with one address.
func Endpoint(host, addr string) index.Endpoint {
	e := index.Endpoint{Host: host, Ready: true, Serving: true}
	e.SetAddr(netip.MustParseAddr(addr))
	return e
}

// Placed returns e as a local pod's endpoint on node, in zone.
func Placed(e index.Endpoint, zone, node string) index.Endpoint {
	e.Local = &index.Placement{Zone: zone, NodeName: node}
	return e
}

// NotReady returns e marked not ready.
func NotReady(e index.Endpoint) index.Endpoint {
	e.Ready, e.Serving = false, false
	return e
}

// FirstNotReady returns copies of sls, each with its first endpoint not ready: a readiness flip
// per slice, for benchmarks of one change.
func FirstNotReady(sls []*index.Slice) []*index.Slice {
	out := make([]*index.Slice, len(sls))
	for i, sl := range sls {
		f := *sl
		f.Endpoints = slices.Clone(sl.Endpoints)
		f.Endpoints[0] = NotReady(f.Endpoints[0])
		out[i] = &f
	}
	return out
}

// Slice returns a slice of the family of its first endpoint's address.
func Slice(ports []index.Port, eps ...index.Endpoint) *index.Slice {
	fam := index.IPv4
	if len(eps) > 0 && eps[0].Addr().Is6() {
		fam = index.IPv6
	}
	return &index.Slice{Family: fam, Ports: ports, Endpoints: eps}
}

// Topology is the topology tests share: this cluster is east (zone z1, region r1); west is in the
// same zone (tier 1), north in the same region (tier 2), south elsewhere (tier 3).
func Topology() *index.Topology {
	return &index.Topology{
		Local:      "east",
		Keys:       index.DefaultKeys,
		ClientKeys: index.DefaultClientKeys,
		Locality: map[string]map[string]string{
			"east":  {index.ZoneKey: "z1", index.RegionKey: "r1"},
			"west":  {index.ZoneKey: "z1", index.RegionKey: "r1"},
			"north": {index.ZoneKey: "z2", index.RegionKey: "r1"},
			"south": {index.ZoneKey: "z9", index.RegionKey: "r9"},
		},
	}
}
