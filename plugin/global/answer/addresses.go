package answer

import (
	"math/rand/v2"
	"net"
	"sort"
	"strings"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// addrs returns one A or AAAA record per record of rs (one family's, in the index's tier order),
// each tier rotated by a random offset unless rotation is off: naive clients dial the first
// address, and the loadbalance plugin would shuffle the tiers away. It makes no more than the
// reply to req can hold and one (the server truncates the reply to fit, and says so), and reads
// no further into a tier than that and its end: the work of an answer is bounded by the client's
// buffer, whatever the service's size. With share, each record is the one kept with its endpoint
// when that has owner's name (see shared).
func (mk *Maker) addrs(owner string, rs []index.Record, req *request.Request, share bool, kept *index.Kept) []dns.RR {
	if len(rs) == 0 {
		return nil
	}
	out := make([]dns.RR, fitting(len(rs), minAddrRR, req))
	off := 0
	if mk.Rotate && len(rs) > 1 {
		off = int(rand.Uint32() >> 1) // the runtime's per-thread generator: no lock, no allocation
	}
	v4 := len(rs[0].IP()) == net.IPv4len
	if kept != nil && share {
		fromList(out, mk.listOf(kept, owner, rs, v4), rs, off)
		return out
	}
	var known *ownerName // owner, as the records found or made here have it (nil: none yet)
	for i, o := 0, 0; o < len(out) && i < len(rs); {
		k, j := rotation(rs, i, off) // the tier, rs[i:j], from rs[k] on and around
		// In runs: from rs[k] to the tier's end, then from its start, as many as out holds.
		for n := min(j-i, len(out)-o); n > 0; k = i {
			run := rs[k:min(j, k+n)]
			for x := range run {
				if kr, ok := run[x].Rendered().(*shared); ok && kr.owner == known && kr.ttl == mk.TTL {
					out[o+x] = kr.rr
				} else {
					out[o+x], known = mk.addrOf(owner, known, &run[x], v4, share)
				}
			}
			o, n = o+len(run), n-len(run)
		}
		i = j
	}
	return out
}

// An answer's address records are shared: each endpoint keeps the record its answers last made
// of it (index.Rendered), and the next answer of the same name and TTL answers with that record
// instead of making one. A reply of 30 records then allocates its list of them, 480 bytes, not
// 2,400, and the collector's work goes with the bytes (BenchmarkServeDNS/client-10000: 1,600 ns
// to 770). Sharing records is what CoreDNS's file plugin does with its zone's: the plugins that
// change a reply (cache, rewrite) copy it first. Per-pod names keep nothing: each has its own
// owner, which would put out the record of the service's name.
//
// The records an answer makes share one ownerName, so that the next answer compares the names of
// the records it finds by address, and the bytes of each name only once.

// shared is an address record kept with its endpoint (the V of its index.Rendered), and what it
// was made for.
type shared struct {
	owner *ownerName
	ttl   uint32
	rr    dns.RR // of sharedA or sharedAAAA
}

// ownerName is the owner name of shared records, one per answer that made them.
type ownerName struct{ name string }

// sharedA and sharedAAAA are a shared record and what holds it, made in one allocation.
type sharedA struct {
	index.Rendered
	shared
	a dns.A
}

type sharedAAAA struct {
	index.Rendered
	shared
	aaaa dns.AAAA
}

// addrOf returns the address record of r (of IPv4 with v4) with owner's name, known (nil: not yet)
// as the answer has it, and owner as it has it from here: the record kept with r's endpoint when
// that has the name, else a new one, kept with the endpoint with share.
func (mk *Maker) addrOf(owner string, known *ownerName, r *index.Record, v4, share bool) (dns.RR, *ownerName) {
	if kr, ok := r.Rendered().(*shared); ok && kr.ttl == mk.TTL && kr.owner.name == owner {
		return kr.rr, kr.owner
	}
	switch {
	case !share && v4:
		return &dns.A{Hdr: mk.hdr(owner, dns.TypeA), A: r.IP()}, known
	case !share:
		return &dns.AAAA{Hdr: mk.hdr(owner, dns.TypeAAAA), AAAA: r.IP()}, known
	case known == nil:
		known = &ownerName{owner}
	}
	if v4 {
		k := &sharedA{a: dns.A{Hdr: mk.hdr(owner, dns.TypeA), A: r.IP()}}
		k.shared, k.V = shared{known, mk.TTL, &k.a}, &k.shared
		r.SetRendered(&k.Rendered)
		return &k.a, known
	}
	k := &sharedAAAA{aaaa: dns.AAAA{Hdr: mk.hdr(owner, dns.TypeAAAA), AAAA: r.IP()}}
	k.shared, k.V = shared{known, mk.TTL, &k.aaaa}, &k.shared
	r.SetRendered(&k.Rendered)
	return &k.aaaa, known
}

// rotation is the rotation of every answer's addresses, with a list (fromList) or without
// (addrs): the tier of rs[i] (rs in tier order) ends at j and is answered from rs[k] on and
// around, rs[k:j] then rs[i:k], k chosen by off, the answer's random offset.
func rotation(rs []index.Record, i, off int) (k, j int) {
	j = tierEnd(rs, i)
	return i + off%(j-i), j
}

// tierEnd returns the end of the tier of rs[i] (rs in tier order): one read when the tier is that
// record alone, as a client's nearest tiers often are, or the rest, as a zonal name's records
// often are; else a bisection of the rest.
func tierEnd(rs []index.Record, i int) int {
	tier, next := rs[i].Tier, i+1
	switch {
	case next == len(rs) || rs[next].Tier != tier:
		return next
	case rs[len(rs)-1].Tier == tier:
		return len(rs)
	}
	return next + sort.Search(len(rs)-next, func(k int) bool { return rs[next+k].Tier != tier })
}

// An answer the index remembers (a ranked or zonal name's: Service.NearestKept) keeps the list of
// its records the last answer of it used, every record of one family that the name's answers are
// read from (100 for a 512-byte reply), in the view's order. The next answer of the same name
// and TTL copies its reply's records from that list, a tier's run at a time, instead of finding
// each record's kept one: a big answer then costs about what a small one does.

// fromList fills out as addrs does, each tier of rs rotated by off, with the records of list
// (list[i] is rs[i]'s), a run at a time.
func fromList(out, list []dns.RR, rs []index.Record, off int) {
	for i, o := 0, 0; o < len(out) && i < len(rs); {
		k, j := rotation(rs, i, off)
		for n := min(j-i, len(out)-o); n > 0; k = i {
			c := copy(out[o:o+min(j-k, n)], list[k:j])
			o, n = o+c, n-c
		}
		i = j
	}
}

// answerList is the records of a remembered answer's records of one family, made for owner's
// name and TTL ttl: rrs[i] is the record of its i-th (a prefix, as long as the answer that made
// it read).
type answerList struct {
	index.Rendered
	owner string
	ttl   uint32
	rrs   []dns.RR
}

// listOf returns the records of rs (of IPv4 with v4), a remembered answer's prefix of one family,
// as the list kept with it has them for owner, made and kept when it has none that holds them.
func (mk *Maker) listOf(kept *index.Kept, owner string, rs []index.Record, v4 bool) []dns.RR {
	f := index.IPv6
	if v4 {
		f = index.IPv4
	}
	if l, ok := kept.Rendered(f).(*answerList); ok && len(l.rrs) >= len(rs) && l.ttl == mk.TTL && l.owner == owner {
		return l.rrs
	}
	return mk.keepList(kept, f, owner, rs, v4)
}

// keepList makes the list of rs's records for owner and keeps it with kept. Never inlined: it runs
// once per remembered answer and name, and its frame would deepen every answer's stack.
//
//go:noinline
func (mk *Maker) keepList(kept *index.Kept, f index.Family, owner string, rs []index.Record, v4 bool) []dns.RR {
	l := &answerList{owner: owner, ttl: mk.TTL, rrs: make([]dns.RR, len(rs))}
	var known *ownerName
	for i := range rs {
		l.rrs[i], known = mk.addrOf(owner, known, &rs[i], v4, true)
	}
	l.V = l
	kept.SetRendered(f, &l.Rendered)
	return l.rrs
}

// fitting is how many of n records of at least perRR bytes the reply to req holds beside its
// header and question, and one (nil: all n). Every reply holds 512 bytes: below what those hold,
// the question's EDNS0 size is not read.
func fitting(n, perRR int, req *request.Request) int {
	if req == nil || n <= 512/perRR+1 {
		return n
	}
	return min(n, (req.Size()-questionLen(req.Req))/perRR+1)
}

// questionLen is the least bytes the header and the question of a reply to r take: 12, the name
// and 4 for type and class. On the wire a name takes a byte more than its text ("a.b.": a length
// byte for each label instead of its dot, and the root's); a name with escapes, longer as text
// than on the wire, is counted as the root alone. Never more than the reply takes: the one record
// more than fit is what makes the server truncate the reply and say so.
func questionLen(r *dns.Msg) int {
	name := r.Question[0].Name
	wire := len(name) + 1
	if name == "." || strings.IndexByte(name, '\\') >= 0 {
		wire = 1
	}
	return 12 + wire + 4
}
