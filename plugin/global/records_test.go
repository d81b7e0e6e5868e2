package global

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// TestSharedRecords: the next answer of a name answers with the address records the last made,
// the same objects; a name of other owner or TTL gets records of its own, and its owner is never
// another name's, whatever the order the names are asked in; a per-pod name leaves the records of
// the service's name kept.
func TestSharedRecords(t *testing.T) {
	g := newGlobal(t, source())
	owners := func(m *dns.Msg, qname string, ttl uint32) {
		t.Helper()
		if len(m.Answer) == 0 {
			t.Fatalf("%s: no answer", qname)
		}
		for _, rr := range m.Answer {
			if h := rr.Header(); h.Name != qname || h.Ttl != ttl {
				t.Fatalf("%s: answered %s", qname, rr)
			}
		}
	}
	same := func(a, b *dns.Msg) bool {
		if len(a.Answer) != len(b.Answer) {
			return false
		}
		for i := range a.Answer {
			if a.Answer[i] != b.Answer[i] { // the same pointers
				return false
			}
		}
		return true
	}
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		first := query(t, g, "foo.db.global.", qtype)
		owners(first, "foo.db.global.", 5)
		if next := query(t, g, "foo.db.global.", qtype); !same(first, next) {
			t.Errorf("%s: the next answer made records again: %v", dns.TypeToString[qtype], rrs(next.Answer))
		}
		// A per-pod name of the same endpoint keeps nothing: the service's name's records stay.
		owners(query(t, g, "foo-0.west.foo.db.global.", qtype), "foo-0.west.foo.db.global.", 5)
		if next := query(t, g, "foo.db.global.", qtype); !same(first, next) {
			t.Errorf("%s: a per-pod name put out the records of the service's name", dns.TypeToString[qtype])
		}
		// Other owners, as asked (case kept), and back.
		for _, qname := range []string{"foo.global.", "FoO.db.global.", "west.foo.db.global.", "foo.db.global."} {
			owners(query(t, g, qname, qtype), qname, 5)
		}
	}
	// Another TTL over the same index: records of its own.
	h := &Global{Zones: g.Zones, recordMaker: recordMaker{ttl: 30}, index: g.index, Next: g.Next}
	owners(query(t, h, "foo.db.global.", dns.TypeA), "foo.db.global.", 30)
	owners(query(t, g, "foo.db.global.", dns.TypeA), "foo.db.global.", 5)

	// Concurrent answers of several names of the same endpoints (go test -race reads this too).
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			qname := []string{"foo.db.global.", "foo.global.", "FOO.db.global.", "west.foo.db.global."}[w%4]
			q := new(dns.Msg)
			q.SetQuestion(qname, dns.TypeA)
			for range 500 {
				rec := dnstest.NewRecorder(&test.ResponseWriter{})
				if _, err := g.ServeDNS(context.Background(), rec, q); err != nil || rec.Msg == nil {
					errs <- fmt.Errorf("%s: %v, %v", qname, rec.Msg, err)
					return
				}
				for _, rr := range rec.Msg.Answer {
					if rr.Header().Name != qname {
						errs <- fmt.Errorf("%s: answered %s", qname, rr)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

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
