package global

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/globaldns/global/plugin/global/answer"
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
	h := &Global{Zones: g.Zones, Next: g.Next, Answerer: answer.Answerer{Maker: answer.Maker{TTL: 30}, Index: g.Index}}
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

// TestAnswerLists: the answers of a ranked or a zonal name, which the index remembers, are made
// from the list of records kept with it: each the records of the view, in order (without
// rotation), as many as the reply holds; the next answer is the same records, the list kept for
// the name and TTL that made it, and another name, case or TTL has records of its own; answers
// asked at once, in several cases and TTLs, each hold their own owner and TTL. (answer's
// TestFromList: a list's rotation is addrs'.)
func TestAnswerLists(t *testing.T) {
	for _, n := range []int{10, 1000} { // 1000: a tier holds more records than a reply
		g := spreadGlobal(t, n)
		g.Rotate = false
		svc := g.Index.Snapshot().Service(index.Key{Namespace: "db", Name: "spread"})
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
			// The records of the remembered view, in order (no rotation), as many as the reply
			// holds and one: all of them, or more than 512 bytes' worth (the server truncates).
			var client *index.Client
			if q.from != "" {
				client = g.Locator.Node(netip.MustParseAddr(q.from))
			}
			var kept *index.Kept
			v := svc.NearestKept(&kept, "", q.zone, 0, client, math.MaxInt)
			if len(first.Answer) > len(v.A) {
				t.Fatalf("%d endpoints, %s: %d records of a view of %d", n, q.qname, len(first.Answer), len(v.A))
			}
			for i, rr := range first.Answer {
				if a, ok := rr.(*dns.A); !ok || a.Hdr.Name != q.qname || a.Hdr.Ttl != g.TTL || !a.A.Equal(v.A[i].IP()) {
					t.Fatalf("%d endpoints, %s: record %d is %s, want %s's A record %s", n, q.qname, i, rr, q.qname, v.A[i].IP())
				}
			}
			if all := len(first.Answer) == len(v.A); !all && first.Len() <= 512 {
				t.Fatalf("%d endpoints, %s: %d records of %d in %d bytes: the reply holds more", n, q.qname, len(first.Answer), len(v.A), first.Len())
			}
			if next := ask(g, q.qname); !slices.Equal(next.Answer, first.Answer) { // the same records
				t.Errorf("%d endpoints, %s: the next answer made records again", n, q.qname)
			}
			// Other owners and another TTL over the same index, one after another, then at once.
			h := &Global{Zones: g.Zones, Next: g.Next, Answerer: answer.Answerer{Maker: answer.Maker{TTL: 30}, Asker: g.Asker, Index: g.Index}}
			names := []string{q.qname, strings.ToUpper(q.qname), strings.Replace(q.qname, "spread.", "SPREAD.", 1)}
			for _, qname := range names {
				for _, p := range []*Global{g, h} {
					for _, rr := range ask(p, qname).Answer {
						if hdr := rr.Header(); hdr.Name != qname || hdr.Ttl != p.TTL {
							t.Fatalf("%d endpoints, %s (TTL %d): answered %s", n, qname, p.TTL, rr)
						}
					}
				}
			}
			g.Rotate, h.Rotate = true, true
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
							if hdr := rr.Header(); hdr.Name != qname || hdr.Ttl != p.TTL {
								errs <- fmt.Errorf("%s (TTL %d): answered %s", qname, p.TTL, rr)
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
			g.Rotate = false
		}
	}
}
