package index

import (
	"sort"
	"sync/atomic"
	"time"
)

// Service is one global service as published in a Snapshot. It is immutable: a change builds a new one.
type Service struct {
	Key
	// Members are the accepted member Services: the local one first, then mirrors by cluster.
	Members []*Member
	// records holds every address of every member, ready or not, ordered: ready first, then IPv4
	// before IPv6, then by tier, cluster, host and address (see Records); a big one's are in
	// inc.parts instead.
	records []Record
	// Warnings lists surprising input met while building (skipped members, duplicate hostnames, ...).
	Warnings []Warning

	v4, ready int32        // Records[:v4] are the ready IPv4 records, Records[v4:ready] the IPv6 ones
	depleted  bool         // see Depleted
	clusters  []clusterRun // each member's cluster (as Members): where its ready records are
	built     int64        // when it was built, in Unix nanoseconds
	topo      *Topology    // what it was built with
	inc       *incremental // nil below incrementalMin records
	// placed are its local records by node and zone, made on the first answer that ranks them
	// from a client or keeps one zone (nearest.go).
	placed atomic.Pointer[placements]
}

// Built returns when the service was built: the last change of any of its objects.
func (s *Service) Built() time.Time { return time.Unix(0, s.built) }

// answers is 1 when s has a ready record, else 0 (also for nil).
func (s *Service) answers() int {
	if s == nil || s.ready == 0 {
		return 0
	}
	return 1
}

// clusterRun locates one member cluster's ready records: Records() a[0] to a[1] (IPv4), aaaa[0] to
// aaaa[1]; and has what its slices carry for mesh-aware clients. One per member of every service:
// int32 offsets (no service has 2^31 records), and the cluster's name is its member's (see
// clusterName).
type clusterRun struct {
	a, aaaa     [2]int32
	annotations *Annotations // the first of the member's slices' (see annotate); nil: none
}

// clusterName returns the name of the cluster of s.clusters[i].
func (s *Service) clusterName(i int) string { return s.topo.ClusterOf(s.Members[i]) }

// Records returns every address of every member, ready or not, ordered: ready first, then IPv4
// before IPv6, then by tier, cluster, host and address. Views are runs of it.
func (s *Service) Records() Records {
	if s.inc != nil {
		return s.inc.parts.all()
	}
	return RecordsOf(s.records)
}

// Len returns how many records Records holds.
func (s *Service) Len() int {
	if s.inc != nil {
		return int(s.inc.parts.starts[len(s.inc.parts.recs)])
	}
	return len(s.records)
}

// All returns the ready records of every member.
func (s *Service) All() View { return s.view(0, int(s.v4), int(s.v4), int(s.ready)) }

// view returns the view of records a to b (IPv4) and c to d (IPv6).
func (s *Service) view(a, b, c, d int) View {
	if s.inc != nil {
		ps := s.inc.parts
		return View{A: ps.slice(0, a, b).Flat(), AAAA: ps.slice(0, c, d).Flat()}
	}
	return View{A: s.records[a:b:b], AAAA: s.records[c:d:d]}
}

// Cluster returns the ready records of one member cluster; ok is false when no member is from it.
func (s *Service) Cluster(cluster string) (View, bool) {
	if c := s.cluster(cluster); c != nil {
		return s.view(int(c.a[0]), int(c.a[1]), int(c.aaaa[0]), int(c.aaaa[1])), true
	}
	return View{}, false
}

func (s *Service) cluster(name string) *clusterRun {
	if i := s.clusterIndex(name); i >= 0 {
		return &s.clusters[i]
	}
	return nil
}

// clusterIndex returns the index in s.clusters of cluster name; -1 when no member is from it.
func (s *Service) clusterIndex(name string) int {
	for i := range s.clusters {
		if s.clusterName(i) == name {
			return i
		}
	}
	return -1
}

// Answers reports whether cluster ("": every member) has ready records: whether Select's view of
// it, without keep, is not empty. Read without making the view, which a zonal name's existence
// needs and its answer does not. Never inlined: its frame would deepen every answer's stack (see
// Service.places).
//
//go:noinline
func (s *Service) Answers(cluster string) bool {
	if cluster == "" {
		return s.ready > 0
	}
	c := s.cluster(cluster)
	return c != nil && (c.a[0] < c.a[1] || c.aaaa[0] < c.aaaa[1])
}

// Select returns the ready records of one scope of s (cluster "": every member's; host "": the
// cluster's, else one endpoint's), those keep admits (nil: all), no more than limit of each
// family: what an answer is made of, read without copying the rest of a big service. The records
// are copied only when keep is given or they span parts.
func (s *Service) Select(cluster, host string, keep func(*Record) bool, limit int) View {
	if s.inc == nil && keep == nil && host == "" { // a small service's records are one array
		a, b, c, d := 0, int(s.v4), int(s.v4), int(s.ready)
		if cluster != "" {
			r := s.cluster(cluster)
			if r == nil {
				return View{}
			}
			a, b, c, d = int(r.a[0]), int(r.a[1]), int(r.aaaa[0]), int(r.aaaa[1])
		}
		b, d = a+min(b-a, limit), c+min(d-c, limit)
		return View{A: s.records[a:b:b], AAAA: s.records[c:d:d]}
	}
	if keep == nil && host != "" { // one endpoint's records: a run of its cluster's, in one part
		v, _ := s.Host(cluster, host)
		a, aaaa := min(len(v.A), limit), min(len(v.AAAA), limit)
		return View{A: v.A[:a:a], AAAA: v.AAAA[:aaaa:aaaa]}
	}
	return s.selectParts(cluster, host, keep, limit)
}

// selectParts is Select past its fast paths (above, without keep): a big service's cluster or
// all its records, or those keep admits. Never inlined: its frame would deepen every answer's
// stack (see Service.places).
//
//go:noinline
func (s *Service) selectParts(cluster, host string, keep func(*Record) bool, limit int) View {
	switch {
	case host != "":
		v, _ := s.Host(cluster, host)
		return View{A: pick(RecordsOf(v.A), keep, limit), AAAA: pick(RecordsOf(v.AAAA), keep, limit)}
	case cluster != "":
		c := s.cluster(cluster)
		if c == nil {
			return View{}
		}
		rs := s.Records()
		return View{A: pick(rs.Slice(int(c.a[0]), int(c.a[1])), keep, limit), AAAA: pick(rs.Slice(int(c.aaaa[0]), int(c.aaaa[1])), keep, limit)}
	}
	rs := s.Records()
	return View{A: pick(rs.Slice(0, int(s.v4)), keep, limit), AAAA: pick(rs.Slice(int(s.v4), int(s.ready)), keep, limit)}
}

// pick returns the first limit records of rs that keep admits (nil: all).
func pick(rs Records, keep func(*Record) bool, limit int) []Record {
	if keep == nil {
		return rs.Slice(0, min(limit, rs.Len())).Flat()
	}
	var out []Record
	for p := range rs.Parts() {
		for i := range p {
			if keep(&p[i]) {
				if out = append(out, p[i]); len(out) == limit {
					return out
				}
			}
		}
	}
	return out
}

// Host returns the ready records of one endpoint; ok is false when it has none. They are in
// one part of a big service: found without a copy.
func (s *Service) Host(cluster, host string) (View, bool) {
	var v View
	if c := s.cluster(cluster); c != nil {
		v = View{A: s.hostRun(c.a, host), AAAA: s.hostRun(c.aaaa, host)}
	}
	return v, !v.Empty()
}

// from returns the records of rs, sorted by host, from the first of host on, as far as the part
// that holds it goes. Never inlined: a big service's search would deepen every per-pod answer's
// stack (see Service.places).
//
//go:noinline
func (rs Records) from(host string) []Record {
	i := rs.search(0, rs.Len(), func(r *Record) bool { return r.Host >= host })
	head, _ := rs.Slice(i, rs.Len()).next()
	return head
}

// hostRun returns the records of host among records run[0] to run[1], one cluster's of one family,
// sorted by host.
func (s *Service) hostRun(run [2]int32, host string) []Record {
	var head []Record
	if s.inc != nil { // a big service's: from the part that holds the first
		head = s.Records().Slice(int(run[0]), int(run[1])).from(host)
	} else {
		head = s.records[run[0]:run[1]]
		head = head[sort.Search(len(head), func(i int) bool { return head[i].Host >= host }):]
	}
	j := 0
	for j < len(head) && head[j].Host == host {
		j++
	}
	return head[:j:j]
}

// incrementalMin is the number of records from which a service keeps what an incremental
// rebuild needs: below it a full rebuild takes microseconds.
const incrementalMin = 256

// incremental is what a big service keeps so that a change to a few of its slices is merged into
// its records instead of sorting them all again.
type incremental struct {
	gens   []uint64        // Source.PodMirrorGeneration of each member, read before its per-pod mirrors
	slices []*Slice        // by ordinal (Record.slice); nil: free
	owners []int32         // by ordinal: the index in Members of the slice's member
	order  [][]int32       // by member: the ordinals of its slices, in the order Source.Slices gave them
	parts  *parts          // the records (no endpoint twice: a service with copies is not incremental)
	counts []clusterCounts // Records by member cluster (as clusters) and state, for health
	merged bool            // built by update, not whole (for tests)
}

// placements are where a service's local ready records are, per address family (by node and by
// zone, each list in answer order, pointing into the records, which are as immutable as the
// version of the service), and what a walk needs of its linked clusters. Immutable once made.
type placements struct {
	family [2]localPlaces // IPv4, IPv6
	// mirrors is where the local cluster's records go among the mirrors, sorted by cluster, in an
	// answer's tier: how many mirrors' names sort before this cluster's.
	localAt int
	// zones are the mirrors' zone localities, as s.clusters (the local member's, if any, "").
	zones []string
	// hosts are the nodes that hold local ready records, by the hash of their name (clientTiers'
	// nodeHash): a collision only keys a client's answers by its node when they need not be.
	hosts map[uint64]struct{}
	memo  memo // answers remembered (memo.go)
}

// Topology returns the topology s was built with: its tiers' and its local records' cluster name's.
func (s *Service) Topology() *Topology { return s.topo }

type clusterCounts struct {
	states      [len(states)]int // by Record.State, in the order of states
	noPodMirror int              // mirror records without a per-pod mirror: readiness from the headless mirror alone
	services    int              // global services with a member in the cluster
}

type localPlaces struct {
	byNode map[string][]*Record
	byZone map[string][]*Record
}
