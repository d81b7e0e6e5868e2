package index

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// Service is one global service as published in a Snapshot. It is immutable: a change builds a new one.
type Service struct {
	Key
	// Members are the accepted member Services: the local one first, then mirrors by cluster.
	Members []*Member
	// Records holds every address of every member, ready or not, ordered: ready first, then IPv4
	// before IPv6, then by tier, cluster, host and address. Views are sub-slices of it.
	Records []Record
	// Warnings lists surprising input met while building (skipped members, duplicate hostnames, ...).
	Warnings []Warning

	v4, ready int          // Records[:v4] are the ready IPv4 records, Records[v4:ready] the IPv6 ones
	clusters  []clusterRun // where each member cluster's ready records are
	built     int64        // when it was built, in Unix nanoseconds
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

// clusterRun locates one cluster's ready records: Records[a[0]:a[1]] (IPv4), Records[aaaa[0]:aaaa[1]].
// int32 offsets: one per member of every service, and no service has 2^31 records.
type clusterRun struct {
	name    string
	a, aaaa [2]int32
}

// All returns the ready records of every member.
func (s *Service) All() View {
	return View{A: s.Records[:s.v4:s.v4], AAAA: s.Records[s.v4:s.ready:s.ready]}
}

// Cluster returns the ready records of one member cluster; ok is false when no member is from it.
func (s *Service) Cluster(cluster string) (View, bool) {
	for i := range s.clusters {
		if c := &s.clusters[i]; c.name == cluster {
			return View{A: s.Records[c.a[0]:c.a[1]:c.a[1]], AAAA: s.Records[c.aaaa[0]:c.aaaa[1]:c.aaaa[1]]}, true
		}
	}
	return View{}, false
}

// Host returns the ready records of one endpoint; ok is false when it has none.
func (s *Service) Host(cluster, host string) (View, bool) {
	c, _ := s.Cluster(cluster)
	v := View{A: hostRun(c.A, host), AAAA: hostRun(c.AAAA, host)}
	return v, !v.Empty()
}

// hostRun returns the records of host in rs, one cluster's records sorted by host.
func hostRun(rs []Record, host string) []Record {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Host >= host })
	j := i
	for j < len(rs) && rs[j].Host == host {
		j++
	}
	return rs[i:j:j]
}

// Warning is surprising input met while building a service: Reason is a metric label, Detail a log line.
type Warning struct{ Reason, Detail string }

// Reasons for warnings.
const (
	ReasonClusterNameClash = "cluster_name_clash"
	ReasonDuplicateMirror  = "duplicate_mirror"
	ReasonPortMismatch     = "port_mismatch"
	ReasonDuplicateHost    = "duplicate_hostname"
)

func warnf(ws *[]Warning, reason, format string, args ...any) {
	*ws = append(*ws, Warning{reason, fmt.Sprintf(format, args...)})
}

// Build assembles the global service k from its members and their slices; nil when it has no member.
func (t *Topology) Build(k Key, src Source) *Service {
	members := src.Members(k)
	if len(members) == 0 {
		return nil
	}
	s := &Service{Key: k, built: time.Now().UnixNano()}
	s.Members = t.acceptMembers(members, &s.Warnings)
	if len(s.Members) == 0 {
		return nil
	}

	slicesOf := make([][]*Slice, len(s.Members))
	total := 0
	for i, m := range s.Members {
		slicesOf[i] = src.Slices(m)
		for _, sl := range slicesOf[i] {
			total += len(sl.Endpoints)
		}
	}
	s.Records = make([]Record, 0, total) // exactly: a snapshot lives long, spare capacity is waste
	for i, m := range s.Members {
		cluster := m.Cluster
		if m.Local() {
			cluster = t.Local
		}
		tier := t.Tier(cluster)
		var pods liveness
		if !m.Local() {
			pods = newLiveness(src.PodMirrors(m))
		}
		var origin *Origin
		for _, sl := range slicesOf[i] {
			ports := sl.Ports
			if !m.Local() {
				ports = servicePorts(m, sl.Ports, &s.Warnings)
			}
			// Port lists are interned: slices of one member nearly always share one origin.
			if origin == nil || !samePorts(origin.Ports, ports) {
				origin = m.originOf(cluster, ports)
			}
			for e := range sl.Endpoints {
				ep := &sl.Endpoints[e]
				r := Record{Endpoint: ep, Origin: origin, Tier: tier, Gateway: pods.of(ep.Addr())}
				if r.Gateway == GatewayDown && (ep.Ready || ep.Serving) {
					down := *ep
					down.Ready, down.Serving = false, false
					r.Endpoint = &down
				}
				s.Records = append(s.Records, r)
			}
		}
	}
	slices.SortFunc(s.Records, compareRecords)
	if d := dedupe(s.Records); len(d) < len(s.Records) {
		s.Records = slices.Clone(d)
	}
	s.index(t.Local)
	return s
}

// samePorts reports whether a and b are the same list (not only equal ones).
func samePorts(a, b []Port) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// liveness answers, by address, whether a mirror's per-pod mirror is up: sorted, so a service of
// thousands of records builds no map.
type liveness []PodMirror

// newLiveness sorts pods, which Source.PodMirrors hands over, in place.
func newLiveness(pods []PodMirror) liveness {
	slices.SortFunc(pods, func(a, b PodMirror) int { return a.Addr.Compare(b.Addr) })
	return pods
}

func (l liveness) of(addr netip.Addr) Gateway {
	i, ok := slices.BinarySearchFunc(l, addr, func(p PodMirror, a netip.Addr) int { return p.Addr.Compare(a) })
	switch {
	case !ok:
		return GatewayUnknown
	case l[i].Ready:
		return GatewayUp
	}
	return GatewayDown
}

// acceptMembers orders members (local first, then by cluster) and drops the ones that would make
// names ambiguous: a mirror claiming this cluster's name, or a second mirror from the same cluster.
func (t *Topology) acceptMembers(in []*Member, warn *[]Warning) []*Member {
	ms := slices.Clone(in)
	slices.SortFunc(ms, func(a, b *Member) int {
		if c := cmp.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	out := ms[:0]
	for _, m := range ms {
		switch {
		case !m.Local() && m.Cluster == t.Local:
			warnf(warn, ReasonClusterNameClash, "mirror %s/%s claims this cluster's name %q: skipped", m.Namespace, m.Name, m.Cluster)
		case len(out) > 0 && out[len(out)-1].Cluster == m.Cluster:
			warnf(warn, ReasonDuplicateMirror, "mirror %s/%s is a second member from cluster %q (kept %s): skipped", m.Namespace, m.Name, m.Cluster, out[len(out)-1].Name)
		default:
			out = append(out, m)
		}
	}
	return out
}

// servicePorts maps a mirror slice's ports (the remote target ports) to the mirror Service's ports
// by name: the per-pod ClusterIP behind each address listens on the Service port, not the target port.
func servicePorts(m *Member, ports []Port, warn *[]Warning) []Port {
	// Usually the names are the Service's, in its order: share its ports, allocate nothing.
	if slices.EqualFunc(ports, m.Ports, func(a, b Port) bool { return a.Name == b.Name }) {
		return m.Ports
	}
	out := make([]Port, 0, len(ports))
	for _, p := range ports {
		i := slices.IndexFunc(m.Ports, func(sp Port) bool { return sp.Name == p.Name })
		if i < 0 {
			warnf(warn, ReasonPortMismatch, "mirror %s/%s: endpoint port %q has no Service port of that name: skipped", m.Namespace, m.Name, p.Name)
			continue
		}
		out = append(out, m.Ports[i])
	}
	return out
}

// compareRecords is the order of a service's records: ready first, then IPv4 before IPv6, tier,
// cluster, host and address.
func compareRecords(a, b Record) int {
	if c := trueFirst(a.Ready, b.Ready); c != 0 {
		return c
	}
	return compareEndpoints(a, b)
}

// trueFirst orders true before false.
func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// dedupe drops, from sorted records, the second copies of an endpoint (the same address of the
// same host in one cluster): an address may sit in two slices for a moment (slice rebalancing).
// The copy kept is ready if either is. Copies of equal readiness are adjacent; a not-ready copy
// of a ready record is found in the ready ones, sorted by the same order. No map: this is in
// every build of every service.
func dedupe(rs []Record) []Record {
	out, ready := rs[:0], 0
	for i := range rs {
		r := rs[i]
		if n := len(out); n > 0 && out[n-1].Ready == r.Ready && compareEndpoints(out[n-1], r) == 0 {
			continue
		}
		if !r.Ready {
			if _, found := slices.BinarySearchFunc(out[:ready], r, compareEndpoints); found {
				continue
			}
		} else {
			ready = len(out) + 1
		}
		out = append(out, r)
	}
	return out
}

// compareEndpoints is compareRecords without readiness: the order of records of one readiness.
// The sort of a big service is mostly this function: strings.Compare, not cmp.Compare (one
// comparison of the strings, not two), and records of one Origin share their cluster.
func compareEndpoints(a, b Record) int {
	if c := trueFirst(a.is4, b.is4); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Tier, b.Tier); c != 0 {
		return c
	}
	if a.Origin != b.Origin {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
	}
	if c := strings.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	return bytes.Compare(a.addr[:], b.addr[:])
}

// index finds the views DNS answers from in the sorted records, so queries never sort.
func (s *Service) index(local string) {
	s.ready = prefixLen(s.Records, func(r *Record) bool { return r.Ready })
	s.v4 = prefixLen(s.Records[:s.ready], func(r *Record) bool { return r.Family() == IPv4 })
	all := s.All()
	s.clusters = make([]clusterRun, 0, len(s.Members))
	for _, m := range s.Members {
		c := m.Cluster
		if m.Local() {
			c = local
		}
		s.clusters = append(s.clusters, clusterRun{name: c, a: span(0, all.A, c), aaaa: span(s.v4, all.AAAA, c)})
	}
	for t := range all.Targets() {
		if len(t.A) > 1 || len(t.AAAA) > 1 {
			warnf(&s.Warnings, ReasonDuplicateHost, "cluster %q has several endpoints with hostname %q: its per-pod name answers all of them", t.Cluster, t.Host)
		}
	}
}

// span returns where cluster's records are in Records, given rs = Records[offset:...].
func span(offset int, rs []Record, cluster string) [2]int32 {
	i := slices.IndexFunc(rs, func(r Record) bool { return r.Cluster == cluster })
	if i < 0 {
		return [2]int32{int32(offset), int32(offset)}
	}
	j := i
	for j < len(rs) && rs[j].Cluster == cluster {
		j++
	}
	return [2]int32{int32(offset + i), int32(offset + j)}
}

// prefixLen returns the length of the longest prefix of rs whose records all satisfy f.
func prefixLen(rs []Record, f func(*Record) bool) int {
	n := 0
	for n < len(rs) && f(&rs[n]) {
		n++
	}
	return n
}
