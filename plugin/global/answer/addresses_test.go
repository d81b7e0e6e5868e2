package answer

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	"github.com/miekg/dns"
)

// TestTierEnd: over every run of tiers of up to 6 records (each record's tier at most one more
// than the last's), tierEnd finds the end of each record's tier as a scan of the records does.
func TestTierEnd(t *testing.T) {
	for n := 1; n <= 6; n++ {
		for steps := range 1 << (n - 1) { // bit k: record k+1 is of a farther tier than record k
			rs := make([]index.Record, n)
			for k := 1; k < n; k++ {
				rs[k].Tier = rs[k-1].Tier + uint8(steps>>(k-1)&1)
			}
			for i := range rs {
				want := i
				for want < n && rs[want].Tier == rs[i].Tier {
					want++
				}
				if got := tierEnd(rs, i); got != want {
					t.Fatalf("tiers %v: tierEnd(%d) = %d, want %d", tiersOf(rs), i, got, want)
				}
			}
		}
	}
}

func tiersOf(rs []index.Record) []uint8 {
	out := make([]uint8, len(rs))
	for i := range rs {
		out[i] = rs[i].Tier
	}
	return out
}

// TestFromList: fromList against the rotation's definition: each tier [i, j) from i + off%(j-i)
// on and around, the tiers in order, as many records as out holds.
func TestFromList(t *testing.T) {
	list := make([]dns.RR, 7)
	for i := range list {
		list[i] = &dns.A{Hdr: dns.RR_Header{Name: fmt.Sprint(i)}}
	}
	for steps := range 1 << 6 {
		rs := make([]index.Record, 7)
		for k := 1; k < 7; k++ {
			rs[k].Tier = rs[k-1].Tier + uint8(steps>>(k-1)&1)
		}
		for off := range 8 {
			var want []dns.RR
			for i := 0; i < len(rs); {
				j := tierEnd(rs, i)
				k := i + off%(j-i)
				want = append(append(want, list[k:j]...), list[i:k]...)
				i = j
			}
			for size := 1; size <= 7; size++ {
				out := make([]dns.RR, size)
				if fromList(out, list, rs, off); !slices.Equal(out, want[:size]) {
					t.Fatalf("tiers %v, off %d, %d records: got %v, want %v", tiersOf(rs), off, size, names(out), names(want[:size]))
				}
			}
		}
	}
}

// names are the owner names of rrs, in order.
func names(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, rr := range rrs {
		out[i] = rr.Header().Name
	}
	return out
}

// TestKeptLists: the list of records kept with a remembered answer (answerList) is made for the
// owner and TTL that asked, one record per record of the answer's family, and found again by the
// next answer of that name and TTL; another owner or TTL makes and keeps one of its own.
func TestKeptLists(t *testing.T) {
	k := index.Key{Namespace: "db", Name: "foo"}
	src := indextest.New()
	src.Add(k, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}}},
		indextest.Slice(nil, indextest.Endpoint("foo-0", "10.0.0.1"), indextest.Endpoint("foo-1", "10.0.0.2"), indextest.Endpoint("foo-2", "10.0.0.3")))
	ix := index.New(indextest.Topology(), src)
	ix.Changed(k)
	ix.Start()
	ix.Publish()
	var kept *index.Kept
	v := ix.Snapshot().Service(k).NearestKept(&kept, "", "", 0, nil, math.MaxInt)
	if kept == nil || len(v.A) != 3 {
		t.Fatalf("no remembered answer of 3 records: %v, %+v", kept, v)
	}
	listed := func(mk *Maker, owner string) []dns.RR {
		t.Helper()
		rrs := mk.listOf(kept, owner, v.A, true)
		l, ok := kept.Rendered(index.IPv4).(*answerList)
		if !ok || l.owner != owner || l.ttl != mk.TTL || len(l.rrs) != len(v.A) || !slices.Equal(l.rrs, rrs) {
			t.Fatalf("%s, TTL %d: the list kept is %+v", owner, mk.TTL, kept.Rendered(index.IPv4))
		}
		for i, rr := range rrs {
			if a, ok := rr.(*dns.A); !ok || a.Hdr.Name != owner || a.Hdr.Ttl != mk.TTL || !a.A.Equal(v.A[i].IP()) {
				t.Fatalf("%s, TTL %d: record %d is %v, want the A record of %s", owner, mk.TTL, i, rr, v.A[i].IP())
			}
		}
		return rrs
	}
	five := &Maker{TTL: 5}
	first := listed(five, "foo.db.global.")
	if next := listed(five, "foo.db.global."); &next[0] != &first[0] {
		t.Error("the next answer of the same name and TTL made its list again")
	}
	listed(five, "FOO.db.global.")
	listed(&Maker{TTL: 30}, "foo.db.global.")
}
