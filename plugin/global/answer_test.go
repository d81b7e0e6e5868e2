package global

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
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

// TestAnswerLists: the answers of a ranked or a zonal name, which the index remembers, are made
// from the list of records kept with it (answerList): each the records an answer without a list
// holds, in order (without rotation); the list is kept for the name and TTL that made it, and
// another name, case or TTL has records of its own; answers asked at once, in several cases and
// TTLs, each hold their own owner and TTL. fromList rotates each tier as addrs does.
func TestAnswerLists(t *testing.T) {
	for _, n := range []int{10, 1000} { // 1000: a tier holds more records than a reply
		g := spreadGlobal(t, n)
		g.rotate = false
		svc := g.index.Snapshot().Service(index.Key{Namespace: "db", Name: "spread"})
		for _, q := range []struct{ qname, from, zone string }{
			{"zb.pin._zone.spread.db.global.", "", "zb"},
			{"spread.db.global.", "10.1.0.1", ""}, // ranked from n1
		} {
			ask := func(g *Global, qname string) *dns.Msg {
				t.Helper()
				m := new(dns.Msg)
				m.SetQuestion(qname, dns.TypeA)
				rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: q.from})
				if _, err := g.ServeDNS(context.Background(), rec, m); err != nil || rec.Msg == nil || len(rec.Msg.Answer) == 0 {
					t.Fatalf("%s: %v, %v", qname, rec.Msg, err)
				}
				return rec.Msg
			}
			first := ask(g, q.qname)
			// What the answer is without a list: the records of the remembered view, made one by one.
			var client *index.Client
			if q.from != "" {
				client = g.locator.Node(netip.MustParseAddr(q.from))
			}
			question := new(dns.Msg)
			question.SetQuestion(q.qname, dns.TypeA)
			req := &request.Request{W: &test.ResponseWriter{}, Req: question}
			var kept *index.Kept
			v := svc.NearestKept(&kept, "", q.zone, 0, client, viewLimit(svc, req))
			want := g.addrs(q.qname, v.A, req, true, nil)
			if g, w := rrs(first.Answer), rrs(want); !slices.Equal(g, w) {
				t.Fatalf("%d endpoints, %s:\n got %q\nwant %q", n, q.qname, g, w)
			}
			if l, ok := kept.Rendered(index.IPv4).(*answerList); !ok || l.owner != q.qname || l.ttl != g.ttl || len(l.rrs) != len(v.A) {
				t.Fatalf("%d endpoints, %s: no list of its %d records kept: %+v", n, q.qname, len(v.A), kept.Rendered(index.IPv4))
			}
			if next := ask(g, q.qname); !slices.Equal(next.Answer, first.Answer) { // the same records
				t.Errorf("%d endpoints, %s: the next answer made records again", n, q.qname)
			}
			// Other owners and another TTL over the same index, one after another, then at once.
			h := &Global{Zones: g.Zones, recordMaker: recordMaker{ttl: 30}, index: g.index, asker: g.asker, Next: g.Next}
			names := []string{q.qname, strings.ToUpper(q.qname), strings.Replace(q.qname, "spread.", "SPREAD.", 1)}
			for _, qname := range names {
				for _, p := range []*Global{g, h} {
					for _, rr := range ask(p, qname).Answer {
						if hdr := rr.Header(); hdr.Name != qname || hdr.Ttl != p.ttl {
							t.Fatalf("%d endpoints, %s (TTL %d): answered %s", n, qname, p.ttl, rr)
						}
					}
				}
			}
			g.rotate, h.rotate = true, true
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Go(func() {
					p, qname := []*Global{g, h}[w%2], names[w/2%len(names)]
					for range 300 {
						m := ask(p, qname)
						if len(m.Answer) != len(first.Answer) {
							errs <- fmt.Errorf("%s: %d records, want %d", qname, len(m.Answer), len(first.Answer))
							return
						}
						for _, rr := range m.Answer {
							if hdr := rr.Header(); hdr.Name != qname || hdr.Ttl != p.ttl {
								errs <- fmt.Errorf("%s (TTL %d): answered %s", qname, p.ttl, rr)
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
			g.rotate = false
		}
	}
	// fromList against the rotation's definition: each tier [i, j) from i + off%(j-i) on and
	// around, the tiers in order, as many records as out holds.
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
					t.Fatalf("tiers %v, off %d, %d records: got %v, want %v", tiersOf(rs), off, size, rrs(out), rrs(want[:size]))
				}
			}
		}
	}
}
