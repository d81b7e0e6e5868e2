package index

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
	"unsafe"
)

// A service version's answers to Nearest questions without a filter are remembered, by who asks
// and what: the next such question is answered from here, with no walk and no copy. Clients that
// see the service alike share an answer: those on nodes without its local records, with the same
// labels of the client keys (a class). So NodeLocal DNSCache on a thousand nodes asks a few
// answers of each service, not a thousand. Bounded: memoSlots answers per service version, each
// no larger than the answer it is (limit records of a family, and the rest of the last one's
// tier: see NearestKept); a question landing on a slot another holds replaces it.

// memoSlots is how many answers a service version remembers.
const memoSlots = 64

// memo is a service version's remembered answers, made with its placements.
type memo struct {
	slots [memoSlots]atomic.Pointer[memoEntry]
}

// memoKey is what decides an answer of Nearest without a filter: the client's class, and its node
// when that holds local records of the service (else ""); the scope, zone, family and limit.
type memoKey struct {
	node, class   string
	cluster, zone string
	family        Family
	limit         int
}

type memoEntry struct {
	key  memoKey
	view View
	kept Kept
}

// Kept is what readers of a remembered answer keep with it, by family, as with an endpoint
// (Endpoint.Rendered): package global keeps the records its last answer made of the view's, which
// the next answers of the same name copy. It is the answer's, and goes with it.
type Kept struct {
	rendered [2]unsafe.Pointer // *Rendered: of the IPv4 records, of the IPv6 ones
}

// Rendered returns what was last kept of the records of family f (nil: none). Answers run at
// once: read atomically.
func (k *Kept) Rendered(f Family) any {
	if r := (*Rendered)(atomic.LoadPointer(&k.rendered[f/IPv6])); r != nil {
		return r.V
	}
	return nil
}

// SetRendered keeps r of the records of family f, in place of what was.
func (k *Kept) SetRendered(f Family, r *Rendered) {
	atomic.StorePointer(&k.rendered[f/IPv6], unsafe.Pointer(r))
}

var memoSeed = maphash.MakeSeed()

// slot returns the slot of key k; h is the hash of its client's class and node, if any.
func (m *memo) slot(k *memoKey, h uint64) *atomic.Pointer[memoEntry] {
	if k.cluster != "" {
		h ^= maphash.String(memoSeed, k.cluster)
	}
	if k.zone != "" {
		h ^= maphash.String(memoSeed, k.zone) * 31
	}
	h ^= uint64(k.family)<<56 ^ uint64(k.limit)*0x9e3779b97f4a7c15
	return &m.slots[h%memoSlots]
}

// classOf is a client's class under topology t: its labels of t's client keys but the node's, which
// decide its tiers, and first its zone, which the walk groups local records by whether or not the
// zone is a client key. Label values hold no NUL.
func classOf(c *Client, t *Topology) string {
	var b strings.Builder
	b.WriteString(c.Zone())
	for _, k := range t.ClientKeys {
		if k != HostnameKey {
			b.WriteByte(0)
			b.WriteString(c.Labels[k])
		}
	}
	return b.String()
}
