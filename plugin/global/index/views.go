package index

import (
	"cmp"
	"slices"
	"sort"
	"strings"
)

// locate finds the views DNS answers from in the sorted records, so queries never sort: by
// binary search, as the records are sorted by readiness, family, tier and cluster.
func (s *Service) locate(t *Topology) {
	rs := s.Records()
	ready := rs.search(0, rs.Len(), func(r *Record) bool { return !r.Ready })
	v4 := rs.search(0, ready, func(r *Record) bool { return !r.is4 })
	s.ready, s.v4 = int32(ready), int32(v4)
	s.clusters = make([]clusterRun, 0, len(s.Members))
	for _, m := range s.Members {
		c := t.ClusterOf(m)
		tier := t.Tier(c)
		s.clusters = append(s.clusters, clusterRun{a: span(rs, 0, v4, tier, c), aaaa: span(rs, v4, ready, tier, c)})
	}
}

// span returns where the records of cluster (of tier tier) are in rs[from:to], one family's
// ready records.
func span(rs Records, from, to int, tier uint8, cluster string) [2]int32 {
	at := func(r *Record) int { return cmp.Or(cmp.Compare(r.Tier, tier), strings.Compare(r.Cluster, cluster)) }
	i := rs.search(from, to, func(r *Record) bool { return at(r) >= 0 })
	j := rs.search(i, to, func(r *Record) bool { return at(r) > 0 })
	return [2]int32{int32(i), int32(j)}
}

// relocate sets s's views from prev's, which s is made from by deleting prev's records dels
// (indexes, sorted) and inserting fresh: a view's bound is where a key would go in the sorted
// records, so it moves by the deleted records before it and the inserted ones that sort before
// it. No record is read but the fresh ones: a big service's are mostly out of the cache by now.
func (s *Service) relocate(t *Topology, prev *Service, dels []int, fresh []Record) {
	shift := func(at int32, b bound) int32 {
		n := int(at) - sort.SearchInts(dels, int(at))
		for i := range fresh {
			if b.above(&fresh[i]) {
				n++
			}
		}
		return int32(n)
	}
	s.v4 = shift(prev.v4, bound{four: true, last: true})
	s.ready = shift(prev.ready, bound{last: true})
	s.clusters = slices.Clone(prev.clusters)
	for i := range s.clusters {
		c, name := &s.clusters[i], s.clusterName(i)
		b := bound{tier: t.Tier(name), cluster: name}
		for _, four := range [2]bool{true, false} {
			run := &c.aaaa
			if b.four = four; four {
				run = &c.a
			}
			b.end = false
			run[0] = shift(run[0], b)
			b.end = true
			run[1] = shift(run[1], b)
		}
	}
}

// bound is a bound of a view in a service's records: in the ready records of one family, at the
// start or the end of the run of one cluster (of tier), or after them all (last).
type bound struct {
	four    bool // IPv4, else IPv6
	tier    uint8
	cluster string
	end     bool
	last    bool
}

// above reports whether r sorts before b.
func (b bound) above(r *Record) bool {
	switch {
	case !r.Ready:
		return false
	case r.is4 != b.four:
		return r.is4 // every ready IPv4 record sorts before the IPv6 ones
	case b.last:
		return true
	}
	k := cmp.Or(cmp.Compare(r.Tier, b.tier), strings.Compare(r.Cluster, b.cluster))
	return k < 0 || b.end && k == 0
}
