package index

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
)

// Service is one global service as published in a Snapshot. It is immutable: a change builds a new one.
type Service struct {
	Key
	// Members are the accepted member Services: the local one first, then mirrors by cluster.
	Members []*Member
	// Records holds every address of every member, ready or not, ordered: ready first, then IPv4
	// before IPv6, then by tier, cluster, host and address. The views below are sub-slices of it.
	Records []Record
	// Warnings lists surprising input met while building (skipped members, duplicate hostnames, ...).
	Warnings []Warning

	all      View
	clusters map[string]View
}

// All returns the ready records of every member.
func (s *Service) All() View { return s.all }

// Cluster returns the ready records of one member cluster; ok is false when no member is from it.
func (s *Service) Cluster(cluster string) (v View, ok bool) {
	v, ok = s.clusters[cluster]
	return v, ok
}

// Host returns the ready records of one endpoint; ok is false when it has none.
func (s *Service) Host(cluster, host string) (View, bool) {
	cv := s.clusters[cluster]
	ts := cv.Targets
	i := sort.Search(len(ts), func(i int) bool { return ts[i].Host >= host })
	if i == len(ts) || ts[i].Host != host {
		return View{}, false
	}
	t := ts[i : i+1]
	return View{A: t[0].A, AAAA: t[0].AAAA, Targets: t}, true
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
	s := &Service{Key: k}
	s.Members = t.acceptMembers(members, &s.Warnings)
	if len(s.Members) == 0 {
		return nil
	}

	type hostAddr struct {
		cluster, host string
		addr          netip.Addr
	}
	seen := map[hostAddr]int{}
	for _, m := range s.Members {
		cluster, zone := m.Cluster, t.Zone(m.Cluster)
		if m.Local() {
			cluster, zone = t.Local, ""
		}
		tier := t.Tier(cluster)
		for _, sl := range src.Slices(m) {
			ports := sl.Ports
			if !m.Local() {
				ports = servicePorts(m, sl.Ports, &s.Warnings)
			}
			for _, ep := range sl.Endpoints {
				z := zone
				if m.Local() {
					z = ep.Zone
				}
				for _, a := range ep.Addrs {
					r := Record{
						Cluster: cluster, Host: ep.Host, Addr: a, Tier: tier,
						Ready: ep.Ready, Serving: ep.Serving, Terminating: ep.Terminating,
						Zone: z, NodeName: ep.NodeName, Pod: ep.Pod, Ports: ports,
					}
					// The same address may sit in two slices for a moment (slice rebalancing); keep
					// one record, ready if either copy is.
					key := hostAddr{cluster, ep.Host, a}
					if i, dup := seen[key]; dup {
						if r.Ready && !s.Records[i].Ready {
							s.Records[i] = r
						}
						continue
					}
					seen[key] = len(s.Records)
					s.Records = append(s.Records, r)
				}
			}
		}
	}
	slices.SortFunc(s.Records, compareRecords)
	s.index(t.Local)
	return s
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

func compareRecords(a, b Record) int {
	if a.Ready != b.Ready {
		if a.Ready {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.Family(), b.Family()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Tier, b.Tier); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Cluster, b.Cluster); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	return a.Addr.Compare(b.Addr)
}

// index cuts the sorted records into the views DNS answers from, so queries never sort.
func (s *Service) index(local string) {
	ready := s.Records[:prefixLen(s.Records, func(r *Record) bool { return r.Ready })]
	v4 := prefixLen(ready, func(r *Record) bool { return r.Family() == IPv4 })
	s.all = View{A: ready[:v4:v4], AAAA: ready[v4:len(ready):len(ready)]}

	// Targets: one per (cluster, host) with the addresses of both families. Within a family the
	// records of one (cluster, host) are adjacent, so each target's addresses are a sub-slice.
	type ch struct{ cluster, host string }
	at := map[ch]int{}
	for _, fam := range []Family{IPv4, IPv6} {
		rs := s.all.A
		if fam == IPv6 {
			rs = s.all.AAAA
		}
		for i := 0; i < len(rs); {
			j := i + 1
			for j < len(rs) && rs[j].Cluster == rs[i].Cluster && rs[j].Host == rs[i].Host {
				j++
			}
			k := ch{rs[i].Cluster, rs[i].Host}
			n, ok := at[k]
			if !ok {
				n = len(s.all.Targets)
				at[k] = n
				s.all.Targets = append(s.all.Targets, Target{Tier: rs[i].Tier, Cluster: k.cluster, Host: k.host, Ports: rs[i].Ports})
			}
			if fam == IPv4 {
				s.all.Targets[n].A = rs[i:j:j]
			} else {
				s.all.Targets[n].AAAA = rs[i:j:j]
			}
			i = j
		}
	}
	slices.SortFunc(s.all.Targets, func(a, b Target) int {
		if c := cmp.Compare(a.Tier, b.Tier); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return cmp.Compare(a.Host, b.Host)
	})
	for _, t := range s.all.Targets {
		if len(t.A) > 1 || len(t.AAAA) > 1 {
			warnf(&s.Warnings, ReasonDuplicateHost, "cluster %q has several endpoints with hostname %q: its per-pod name answers all of them", t.Cluster, t.Host)
		}
	}

	s.clusters = make(map[string]View, len(s.Members))
	for _, m := range s.Members {
		c := m.Cluster
		if m.Local() {
			c = local
		}
		s.clusters[c] = View{
			A:       run(s.all.A, func(r Record) string { return r.Cluster }, c),
			AAAA:    run(s.all.AAAA, func(r Record) string { return r.Cluster }, c),
			Targets: run(s.all.Targets, func(t Target) string { return t.Cluster }, c),
		}
	}
}

// prefixLen returns the length of the longest prefix of rs whose records all satisfy f.
func prefixLen(rs []Record, f func(*Record) bool) int {
	n := 0
	for n < len(rs) && f(&rs[n]) {
		n++
	}
	return n
}

// run returns the adjacent elements of xs whose key is want.
func run[T any](xs []T, key func(T) string, want string) []T {
	i := slices.IndexFunc(xs, func(x T) bool { return key(x) == want })
	if i < 0 {
		return nil
	}
	j := i
	for j < len(xs) && key(xs[j]) == want {
		j++
	}
	return xs[i:j:j]
}
