package indextest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/globaldns/global/plugin/global/index"
)

// RandomService is a global service db/big for randomized tests: a member per cluster, each with
// the slices its test gives it, of endpoints whose addresses and hostnames never repeat. The test
// changes it at random through Rand, Src and the helpers below.
type RandomService struct {
	Rand    *rand.Rand
	Src     *Source
	Key     index.Key
	Members []*index.Member
	Ports   []index.Port
	next    int // for addresses and hostnames never used
}

// NewRandomService returns the service with no member, drawing from rng.
func NewRandomService(rng *rand.Rand) *RandomService {
	return &RandomService{Rand: rng, Src: New(), Key: index.Key{Namespace: "db", Name: "big"},
		Ports: []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}}
}

// AddMember adds the member of cluster ("" for the local one) with slices sls; a mirror's per-pod
// mirrors are all ready.
func (r *RandomService) AddMember(cluster string, sls ...*index.Slice) *index.Member {
	name := r.Key.Name
	if cluster != "" {
		name += "-" + cluster
	}
	m := &index.Member{Namespace: r.Key.Namespace, Name: name, Origin: index.Origin{Cluster: cluster, Ports: r.Ports}}
	r.Src.Add(r.Key, m, sls...)
	r.Members = append(r.Members, m)
	if !m.Local() {
		r.PodMirrors(m, 0)
	}
	return m
}

// Endpoint is a ready endpoint of a hostname and address never used, IPv6 when v6.
func (r *RandomService) Endpoint(v6 bool) index.Endpoint {
	a := r.Addr(v6)
	return Endpoint(fmt.Sprintf("p-%d", r.next), a.String())
}

// Addr is an address never used, IPv6 when v6.
func (r *RandomService) Addr(v6 bool) netip.Addr {
	r.next++
	if v6 {
		return netip.MustParseAddr(fmt.Sprintf("fd00::%x", r.next))
	}
	return netip.MustParseAddr(fmt.Sprintf("10.%d.%d.%d", r.next/65536, r.next/256%256, r.next%256))
}

// Next is a number never drawn before, for names.
func (r *RandomService) Next() int {
	r.next++
	return r.next
}

// Last is the number the last address, endpoint or Next drew.
func (r *RandomService) Last() int { return r.next }

// PodMirrors sets every per-pod mirror of mirror m, down ones down in a hundred.
func (r *RandomService) PodMirrors(m *index.Member, down int) {
	r.Src.SetPodMirrorsOf(m, func() bool { return r.Rand.IntN(100) >= down })
}
