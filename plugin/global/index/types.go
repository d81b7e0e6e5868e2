// Package index holds the global services: which Services are members of each, their endpoints as
// records with topology tiers, and an immutable snapshot that DNS and the EndpointSlice writer read.
// It knows nothing about DNS or about how members are discovered (see package watch).
package index

import (
	"cmp"
	"iter"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Key names one global service: the original service name and its namespace.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Family is an address family of an EndpointSlice.
type Family uint8

// Address families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// Port is a port a client dials at a record's address.
type Port struct {
	Name     string
	Port     int32
	Protocol string // TCP, UDP or SCTP
}

// PortsKey returns a string that is equal for equal port lists.
func PortsKey(ps []Port) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.Name)
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(int(p.Port)))
		b.WriteByte('/')
		b.WriteString(p.Protocol)
		b.WriteByte(',')
	}
	return b.String()
}

// Member is one Service that contributes endpoints to a global service: the local headless
// Service or the headless mirror of it from one linked cluster. It is immutable once built.
type Member struct {
	Namespace, Name string // the member Service itself (e.g. foo-west)
	// Origin is the linked cluster ("" for the local Service) and the Service's ports (for
	// mirrors, what clients dial): a mirror's records share it.
	Origin
	// Settings are what its owner set on the Service that the plugin uses; nil: none.
	Settings *Settings

	// local is the Origin a local member's records last had (their cluster is this one's name,
	// their ports the slices'), shared by the next build's records when it still fits: one
	// allocation fewer per build, in the space a Member's size class leaves free.
	local atomic.Pointer[Origin]
}

// originOf returns an Origin of cluster and ports for m's records, one m already has if it fits.
func (m *Member) originOf(cluster string, ports []Port) *Origin {
	if m.Cluster == cluster && samePorts(m.Ports, ports) {
		return &m.Origin
	}
	if o := m.local.Load(); o != nil && o.Cluster == cluster && samePorts(o.Ports, ports) {
		return o
	}
	o := &Origin{Cluster: cluster, Ports: ports}
	m.local.Store(o)
	return o
}

// Local reports whether m is this cluster's own Service.
func (m *Member) Local() bool { return m.Cluster == "" }

// Slice is one EndpointSlice of a member, reduced to what the index needs. Immutable once built.
type Slice struct {
	Family Family
	// Unnamed counts the endpoints of a mirror's slice left out for having no hostname: Linkerd
	// mirrors only pods with one into a headless mirror, so such an address is not a pod (see
	// watch).
	Unnamed     int32
	Ports       []Port // as written in the slice: the pods' target ports
	Endpoints   []Endpoint
	Annotations *Annotations // a mirror's, of SliceAnnotationKeys; nil: none (shared, one per distinct list)
}

// Settings are what a member Service's owner set on it that the plugin uses.
type Settings struct {
	Annotations Annotations // of ServiceAnnotationKeys, which the written Service carries
	Policy      *Policy     // AnnotationPolicy, nil without a valid one
}

// Endpoint is one endpoint of a Slice. Conditions follow EndpointSlice semantics with nil resolved.
// 56 bytes, as there is one per record: the address is kept as its 16 bytes (a netip.Addr takes
// 24, which made 64).
type Endpoint struct {
	Host        string         // a DNS label; the dashed address when the slice has none
	Local       *Placement     // where a local pod runs; nil for mirrored endpoints
	rendered    unsafe.Pointer // a *Rendered (SetRendered); atomic.Pointer is not to be copied, endpoints are
	addr        [16]byte       // the first address, the one Kubernetes' own consumers use
	is4         bool           // addr holds an IPv4 address in its first 4 bytes
	Ready       bool
	Serving     bool
	Terminating bool
}

// Addr returns the endpoint's address.
func (e *Endpoint) Addr() netip.Addr {
	if e.is4 {
		return netip.AddrFrom4([4]byte(e.addr[:4]))
	}
	return netip.AddrFrom16(e.addr)
}

// IP returns the endpoint's address bytes, 4 or 16, shared with the endpoint (which does not change
// once made): answers' records point at them instead of copying, as the hosts plugin's records
// share its table. Nothing may write to them.
func (e *Endpoint) IP() net.IP {
	if e.is4 {
		return e.addr[:4:4]
	}
	return e.addr[:]
}

// Rendered is what a reader of the index made of an endpoint and keeps with it to use again:
// package global keeps the address record its answers last made of it, which the next answers of
// the same name share instead of making their own. An endpoint does not change once made, so
// neither does what is made of it.
type Rendered struct{ V any }

// Rendered returns the value last kept with e (nil: none). Answers run at once: read atomically.
func (e *Endpoint) Rendered() any {
	if r := (*Rendered)(atomic.LoadPointer(&e.rendered)); r != nil {
		return r.V
	}
	return nil
}

// SetRendered keeps r with e, in place of what was.
func (e *Endpoint) SetRendered(r *Rendered) { atomic.StorePointer(&e.rendered, unsafe.Pointer(r)) }

// clone returns a copy of e with nothing rendered: copying that field would race with SetRendered.
func (e *Endpoint) clone() Endpoint {
	return Endpoint{Host: e.Host, Local: e.Local, addr: e.addr, is4: e.is4,
		Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating}
}

// SetAddr sets the endpoint's address: IPv4, or IPv6 without a zone.
func (e *Endpoint) SetAddr(a netip.Addr) {
	if e.is4 = a.Is4(); e.is4 {
		v := a.As4()
		e.addr = [16]byte{}
		copy(e.addr[:], v[:])
		return
	}
	e.addr = a.As16()
}

// Placement is where a local pod runs: only this cluster's endpoints have one.
type Placement struct {
	Zone     string
	NodeName string
	Pod      string // targetRef name
}

// PodMirror is one of Linkerd's per-pod mirrors of a headless mirror member: the ClusterIP
// Service whose address is a record's address, and whether it has a ready endpoint. Linkerd marks
// those endpoints not ready while the linked cluster's gateway fails its probe, and keeps them
// current (on every probe change and every endpoint-refresh-period), so this is the signal that a
// linked cluster is reachable. The headless mirror's own readiness is not: Linkerd marks its
// addresses not ready only when it rewrites it while the gateway is down, and leaves them so after
// the gateway returns (linkerd2 multicluster/service-mirror: cluster_watcher_headless.go
// createOrUpdateHeadlessEndpoints mirrors only ready remote addresses, through
// cluster_watcher.go updateMirrorEndpoints -> updateReadiness; repairEndpoints skips headless
// mirrors).
type PodMirror struct {
	Addr  netip.Addr // the per-pod Service's ClusterIP
	Ready bool       // some EndpointSlice of it has a ready endpoint
}

// Source is what the index reads to build a global service: the watcher's tables.
// Every call must be cheap and safe for concurrent use.
type Source interface {
	// Services returns every global service that has a member Service, accepted or not, in any
	// order: a new topology may accept a member it did not (a cluster linked after its mirrors
	// were made), so it rebuilds these, not only the services published.
	Services() []Key
	// Members returns the Services that are members of the global service k, in any order.
	Members(k Key) []*Member
	// Slices returns the EndpointSlices of member m, in any order.
	Slices(m *Member) []*Slice
	// PodMirrors returns the per-pod mirrors of mirror member m, in any order (none for local
	// members), in a slice the caller owns.
	PodMirrors(m *Member) []PodMirror
	// PodMirrorGeneration changes whenever PodMirrors(m)'s answer may have (0: m has none): a
	// service built after reading its members' generations, still current, has its gateway
	// states right. One per headless mirror, so that per-pod mirrors changing elsewhere do not
	// make every big service's next change a whole rebuild.
	PodMirrorGeneration(m *Member) uint64
}

// Gateway is what Linkerd's gateway probe says about a mirror record, through its per-pod mirror.
type Gateway uint8

// Gateway states.
const (
	GatewayUnknown Gateway = iota // a local record, or a mirror record without a per-pod mirror: its endpoint's readiness
	GatewayUp                     // the per-pod mirror has a ready endpoint: the record is ready, whatever the headless mirror says
	GatewayDown                   // it has none: the record is answered as not ready
)

// Record is one endpoint of one member cluster, as answered: 24 bytes, the endpoint itself shared
// with the watcher's cache (a copy, not ready, when its gateway is down), its origin with the
// other records of its member and ports.
type Record struct {
	*Endpoint // host, address, conditions, placement
	*Origin   // cluster and ports
	Tier      uint8
	Gateway   Gateway // liveness of a mirror record's per-pod mirror
	slice     uint32  // which slice of its service it came from (incremental.slices)
}

// Origin is what the records of one member (and one port list) share.
type Origin struct {
	Cluster string // this cluster's name for local pods ("" in a local Member)
	Ports   []Port // ports to dial at Addr: slice ports (local), mirror Service ports (mirrors)
}

// State names why a record is answered or left out: ready, not_ready, terminating or
// gateway_down (its endpoint is ready but Linkerd's gateway to its cluster is not).
func (r *Record) State() string { return states[r.stateIndex()] }

func (r *Record) stateIndex() int {
	switch {
	case r.Gateway == GatewayDown:
		return stateGatewayDown
	case r.Ready:
		return stateReady
	case r.Terminating:
		return stateTerminating
	}
	return stateNotReady
}

// Record states as indexes, for counting them.
const (
	stateReady = iota
	stateNotReady
	stateTerminating
	stateGatewayDown
)

var states = [...]string{stateReady: StateReady, stateNotReady: StateNotReady, stateTerminating: StateTerminating, stateGatewayDown: StateGatewayDown}

// Record states, as State returns them.
const (
	StateReady       = "ready"
	StateNotReady    = "not_ready"
	StateTerminating = "terminating"
	StateGatewayDown = "gateway_down"
)

// Family returns the record's address family.
func (r *Record) Family() Family {
	if r.is4 {
		return IPv4
	}
	return IPv6
}

// Target is one ready endpoint, (cluster, host), with its addresses: what an SRV record points at.
// Its tier, cluster, host and ports are those of its first record (the first A, else the first
// AAAA), shared rather than copied: an SRV answer walks targets on every query, copying each a
// few times, and a target is 56 bytes instead of the 112 it took holding them.
type Target struct {
	*Record
	A, AAAA []Record
}

// View is the ready part of a global service in one scope (all, a cluster, one host), in answer order.
// A view of a big service's parts (see Records) that spans several is a copy: as big as the
// answer made from it.
type View struct {
	A, AAAA []Record
}

// Empty reports whether the view has no ready address.
func (v View) Empty() bool { return len(v.A) == 0 && len(v.AAAA) == 0 }

// Targets yields the view's endpoints in answer order, each with its addresses of both families.
// Both families are sorted by (tier, cluster, host), so this merges them without sorting.
func (v View) Targets() iter.Seq[Target] {
	return func(yield func(Target) bool) {
		a, aaaa := v.A, v.AAAA
		for len(a) > 0 || len(aaaa) > 0 {
			var t Target
			switch c := compareHeads(a, aaaa); {
			case c < 0:
				t, a = target(a)
			case c > 0:
				t, aaaa = target(aaaa)
				t.A, t.AAAA = nil, t.A
			default:
				t, a = target(a)
				var six Target
				six, aaaa = target(aaaa)
				t.AAAA = six.A
			}
			if !yield(t) {
				return
			}
		}
	}
}

// target takes the records of the endpoint at the head of rs (adjacent, same cluster and host),
// returned in the target's A field.
func target(rs []Record) (Target, []Record) {
	j := 1
	for j < len(rs) && rs[j].Cluster == rs[0].Cluster && rs[j].Host == rs[0].Host {
		j++
	}
	return Target{Record: &rs[0], A: rs[:j:j]}, rs[j:]
}

// compareHeads orders the endpoints at the heads of a and b; an empty list comes last.
func compareHeads(a, b []Record) int {
	switch {
	case len(a) == 0:
		return 1
	case len(b) == 0:
		return -1
	}
	// Each comparison only when the one before ties (cmp.Or would make all three), and strings
	// compared once each (cmp.Compare compares twice).
	x, y := &a[0], &b[0]
	if x.Tier != y.Tier {
		return cmp.Compare(x.Tier, y.Tier)
	}
	if c := strings.Compare(x.Cluster, y.Cluster); c != 0 {
		return c
	}
	return strings.Compare(x.Host, y.Host)
}

// Annotation is one annotation kept. A Relative one's Value is what follows "<svc>.<ns>." in the
// annotation's value, svc and ns being the global service's own: a remote service's fully qualified
// name, which every mirror of it spells out, is so kept once per linked cluster's domain, not once
// per mirror.
type Annotation struct {
	Key, Value string
	Relative   bool
}

// Annotations are the annotations of an object that are kept, sorted by key; nil for none.
type Annotations []Annotation

// Policy is which tiers of a global service an answer keeps. The zero Policy is `all`: every
// tier, nearest first, what a StatefulSet's peers need. `nearest N` keeps the nearest tiers,
// whole, until they hold at least N ready records: what its clients need, the nearest healthy
// members, and the next tier only when those are gone (a tier with no ready record is skipped).
type Policy struct {
	Nearest int // 0: all; else N
}

// samePorts reports whether a and b are the same list (not only equal ones).
func samePorts(a, b []Port) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Warning is surprising input met while building a service: Reason is a metric label, Detail a log line.
type Warning struct {
	Reason, Detail string
	cluster, host  string // of a duplicate hostname
}
