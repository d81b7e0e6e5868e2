package index

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"
)

// AnnotationPolicy, on a global service's local Service, is its owner's policy (see Policy).
const AnnotationPolicy = "globaldns.io/policy"

// MaxNearest bounds `nearest N`: an answer larger than this is every tier in practice.
const MaxNearest = 1000

// ParsePolicy parses `all`, `nearest` or `nearest N` (N from 1 to MaxNearest).
func ParsePolicy(s string) (Policy, error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 1 && f[0] == contract.DefaultPolicy:
		return Policy{}, nil
	case len(f) == 1 && f[0] == "nearest":
		return Policy{Nearest: 1}, nil
	case len(f) == 2 && f[0] == "nearest":
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 || n > MaxNearest {
			return Policy{}, fmt.Errorf("nearest takes a number of records from 1 to %d, not %q", MaxNearest, f[1])
		}
		return Policy{Nearest: n}, nil
	}
	return Policy{}, fmt.Errorf("a policy is all, nearest or nearest N, not %q", s)
}

func (p Policy) String() string {
	switch p.Nearest {
	case 0:
		return contract.DefaultPolicy
	case 1:
		return "nearest"
	}
	return "nearest " + strconv.Itoa(p.Nearest)
}

// Policy returns the policy the owner of s set on its Service: the local one's when there is one;
// else the first mirror's, which Linkerd copies from the remote Service. ok is false without one.
func (s *Service) Policy() (p Policy, ok bool) {
	if len(s.Members) == 0 || s.Members[0].Settings == nil || s.Members[0].Settings.Policy == nil {
		return Policy{}, false
	}
	return *s.Members[0].Settings.Policy, true
}

// Depleted reports whether the nearest tier that has a member of s has no ready record: an answer
// that keeps the nearest tiers fails over to farther ones.
func (s *Service) Depleted() bool { return s.depleted }

// computeDepleted computes Depleted once s's records are placed.
func (s *Service) computeDepleted() bool {
	nearest, ready := uint8(255), false
	for i, c := range s.clusters {
		tier, has := s.topo.Tier(s.clusterName(i)), c.a[1] > c.a[0] || c.aaaa[1] > c.aaaa[0]
		switch {
		case tier < nearest:
			nearest, ready = tier, has
		case tier == nearest:
			ready = ready || has
		}
	}
	return !ready
}

// MemberCluster is a member cluster of a service, and its tier.
type MemberCluster struct {
	Name string
	Tier uint8
}

// Clusters returns the member clusters of s.
func (s *Service) Clusters() []MemberCluster {
	out := make([]MemberCluster, len(s.clusters))
	for i := range s.clusters {
		name := s.clusterName(i)
		out[i] = MemberCluster{name, s.topo.Tier(name)}
	}
	return out
}

// Keep returns the prefix of rs, one address family's ready records in tier order, that p
// answers: all of them, or the nearest tiers until they hold at least p.Nearest. Tiers ascend, so
// the end of the tier that holds the p.Nearest-th record is found by bisection: what Ends says
// for each record in turn, in O(log n).
func (p Policy) Keep(rs []Record) []Record {
	if p.Nearest == 0 || len(rs) <= p.Nearest {
		return rs
	}
	last := rs[p.Nearest-1].Tier
	return rs[:sort.Search(len(rs), func(i int) bool { return i >= p.Nearest && p.Ends(rs[i].Tier, last, i) })]
}

// KeepTargets returns the prefixes of v's records that hold the targets an SRV answer of ports q
// keeps under p: all, or the nearest whole tiers until they hold p.Nearest targets with a port q
// asks for. Each target is one member, counted once, whatever its ports and addresses: Keep's
// cut (Ends), of targets.
func (p Policy) KeepTargets(v View, q *PortQuery) View {
	if p.Nearest == 0 {
		return v
	}
	held, last := 0, uint8(0)
	for t := range v.Targets() {
		if p.Ends(t.Tier, last, held) {
			return View{A: below(v.A, t.Tier), AAAA: below(v.AAAA, t.Tier)}
		}
		if slices.ContainsFunc(t.Ports, q.Matches) {
			held++
		}
		last = t.Tier
	}
	return v
}

// below returns the prefix of rs, records in tier order, of the tiers nearer than tier.
func below(rs []Record, tier uint8) []Record {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Tier >= tier })
	return rs[:i:i]
}

// PortQuery is the ports an SRV name (_<port>._<proto>) or a _<proto> name asks for: of name Name
// and protocol Protocol, "" for any. A name without port labels asks for every port.
type PortQuery struct{ Name, Protocol string }

// Matches reports whether port p is one q asks for.
func (q *PortQuery) Matches(p Port) bool {
	return (q.Name == "" || p.Name == q.Name) && (q.Protocol == "" || p.Protocol == q.Protocol)
}

// Ends reports whether an answer under p ends before tier, which follows tier last (tiers come
// nearest first), when the tiers before it hold held of what p counts (records of one family, or
// SRV targets): under nearest N, once they hold N, no farther tier is answered. It is the one rule
// of every answer and of its explanation.
func (p Policy) Ends(tier, last uint8, held int) bool {
	return tier != last && p.Nearest > 0 && held >= p.Nearest
}
