package global

import (
	"github.com/globaldns/global/plugin/global/index"

	"github.com/miekg/dns"
)

// An answer the index remembers (a ranked or zonal name's: Service.NearestKept) keeps the list of
// its records the last answer of it used, every record of one family that the name's answers are
// read from (100 for a 512-byte reply), in the view's order. The next answer of the same name
// and TTL copies its reply's records from that list, a tier's run at a time, instead of finding
// each record's kept one: a big answer then costs about what a small one does.

// fromList fills out as addrs does, each tier of rs rotated by off, with the records of list
// (list[i] is rs[i]'s), a run at a time.
func fromList(out, list []dns.RR, rs []index.Record, off int) {
	for i, o := 0, 0; o < len(out) && i < len(rs); {
		j := tierEnd(rs, i)
		k := i + off%(j-i)
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
func (mk *recordMaker) listOf(kept *index.Kept, owner string, rs []index.Record, v4 bool) []dns.RR {
	f := index.IPv6
	if v4 {
		f = index.IPv4
	}
	if l, ok := kept.Rendered(f).(*answerList); ok && len(l.rrs) >= len(rs) && l.ttl == mk.ttl && l.owner == owner {
		return l.rrs
	}
	return mk.keepList(kept, f, owner, rs, v4)
}

// keepList makes the list of rs's records for owner and keeps it with kept. Never inlined: it runs
// once per remembered answer and name, and its frame would deepen every answer's stack.
//
//go:noinline
func (mk *recordMaker) keepList(kept *index.Kept, f index.Family, owner string, rs []index.Record, v4 bool) []dns.RR {
	l := &answerList{owner: owner, ttl: mk.ttl, rrs: make([]dns.RR, len(rs))}
	var known *ownerName
	for i := range rs {
		l.rrs[i], known = mk.addrOf(owner, known, &rs[i], v4, true)
	}
	l.V = l
	kept.SetRendered(f, &l.Rendered)
	return l.rrs
}
