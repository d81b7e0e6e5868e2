package global

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

var big = index.Key{Namespace: "db", Name: "big"}

// The least bytes an A and an SRV record take in a reply (RFC 1035 4.1.3), the owner name a
// 2-byte pointer: type, class, TTL and length 10, then the address's 4, or priority, weight and
// port's 6 and at least a 2-byte pointer for the target. A reply of n bytes holds at most
// n/least of them.
const (
	leastA   = 2 + 10 + 4
	leastSRV = 2 + 10 + 6
)

// bigGlobal is the plugin over db/big: 10,000 local endpoints and 10 in west, slices of 100.
func bigGlobal(t testing.TB) *Global {
	t.Helper()
	src := indextest.New()
	var sls []*index.Slice
	for s := range 100 {
		var eps []index.Endpoint
		for e := s * 100; e < (s+1)*100; e++ {
			eps = append(eps, indextest.Endpoint(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.1.%d.%d", e/250, e%250)))
		}
		sls = append(sls, indextest.Slice(dbPort, eps...))
	}
	src.Add(big, &index.Member{Namespace: "db", Name: "big", Origin: index.Origin{Ports: dbPort}}, sls...)
	var west []index.Endpoint
	for e := range 10 {
		west = append(west, indextest.Endpoint(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.96.9.%d", e)))
	}
	src.Add(big, &index.Member{Namespace: "db", Name: "big-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}}, indextest.Slice(dbPort, west...))
	g := newGlobal(t, src, big)
	g.Explain = true
	return g
}

// An answer of a service of 10,000 endpoints makes no more records than the reply can hold: over
// UDP a few dozen, which the server's scrub (CoreDNS's ScrubWriter, applied here as it does)
// truncates to the longest prefix of the whole answer that fits, with TC set (A records: one more
// than fit, besides the OPT record's room, is made); over TCP all that
// 64 KiB can hold. The explanation, over UDP, is never more than 3 times the query: TC without
// records (the client asks again over TCP).
func TestAnswersBoundedByTheReply(t *testing.T) {
	g := bigGlobal(t)
	g.Rotate = false // prefixes compare
	ask := func(qname string, qtype, class uint16, tcp bool, bufsize uint16) (made, sent *dns.Msg) {
		m := new(dns.Msg)
		m.SetQuestion(qname, qtype)
		m.Question[0].Qclass = class
		if bufsize > 0 {
			m.SetEdns0(bufsize, false)
		}
		w := &test.ResponseWriter{TCP: tcp}
		rec := dnstest.NewRecorder(w)
		if _, err := g.ServeDNS(context.Background(), rec, m); err != nil {
			t.Fatal(err)
		}
		sent = rec.Msg.Copy()
		state := request.Request{W: w, Req: m}
		state.SizeAndDo(sent)
		state.Scrub(sent)
		return rec.Msg, sent
	}
	for _, q := range []struct {
		qname        string
		qtype, class uint16
		bound        int // the most records an answer over UDP may make
	}{
		{"big.db.global.", dns.TypeA, dns.ClassINET, 1232/leastA + 1},
		{"big.db.global.", dns.TypeSRV, dns.ClassINET, 60},
		{"_db._tcp.big.db.global.", dns.TypeSRV, dns.ClassINET, 60},
		{"big.db.global.", dns.TypeTXT, dns.ClassCHAOS, 20},
	} {
		_, whole := ask(q.qname, q.qtype, q.class, true, 0)
		for _, size := range []uint16{0, 1232} {
			made, sent := ask(q.qname, q.qtype, q.class, false, size)
			if q.class == dns.ClassCHAOS {
				query := new(dns.Msg).SetQuestion(q.qname, q.qtype)
				if size > 0 {
					query.SetEdns0(size, false)
				}
				if !sent.Truncated || len(sent.Answer)+len(sent.Ns) > 0 || sent.Len() > 3*query.Len() {
					t.Errorf("%s CH at %d bytes: TC %v, %d records in %d bytes, want TC and none (query %d bytes)", q.qname, size, sent.Truncated, len(sent.Answer)+len(sent.Ns), sent.Len(), query.Len())
				}
				continue
			}
			if n := len(made.Answer) + len(made.Extra); n > q.bound {
				t.Errorf("%s %s at %d bytes: made %d records, more than %d", q.qname, dns.TypeToString[q.qtype], size, n, q.bound)
			}
			// Addresses: one record more than the reply holds, so that the server truncates it and
			// says so; two with EDNS0, whose OPT record is not counted.
			if want := len(sent.Answer) + 1 + min(int(size), 1); q.qtype == dns.TypeA && len(made.Answer) > want {
				t.Errorf("%s A at %d bytes: made %d records for a reply of %d, want at most %d", q.qname, size, len(made.Answer), len(sent.Answer), want)
			}
			if !sent.Truncated || len(sent.Answer) == 0 || !slices.Equal(rrs(sent.Answer), rrs(whole.Answer[:len(sent.Answer)])) {
				t.Errorf("%s %s at %d bytes: TC %v, %d records, not a prefix of the answer over TCP", q.qname, dns.TypeToString[q.qtype], size, sent.Truncated, len(sent.Answer))
			}
		}
		if whole.Len() > dns.MaxMsgSize || len(whole.Answer) < 100 {
			t.Errorf("%s %s over TCP: %d records in %d bytes", q.qname, dns.TypeToString[q.qtype], len(whole.Answer), whole.Len())
		}
	}
}

// An SRV answer makes no more records than the reply holds, however many ports a target has: a
// pod of a Service of 20,000 ports (what an EndpointSlice may hold) makes a reply's worth of SRV
// records over UDP, not 20,000; the weight of the tier still counts them all.
func TestSRVBoundedByTheReplyInPorts(t *testing.T) {
	ports := make([]index.Port, 20000)
	for i := range ports {
		ports[i] = index.Port{Name: fmt.Sprintf("p%d", i), Port: int32(1024 + i), Protocol: "TCP"}
	}
	many := index.Key{Namespace: "db", Name: "many"}
	src := indextest.New()
	src.Add(many, &index.Member{Namespace: "db", Name: "many", Origin: index.Origin{Ports: ports}},
		indextest.Slice(ports, indextest.Endpoint("many-0", "10.5.0.1")))
	g := newGlobal(t, src, many)
	for _, q := range []struct {
		qname string
		tcp   bool
		most  int
	}{
		{"many.db.global.", false, 4096/leastSRV + 1}, // serveOver asks with a buffer of 4096
		{"many.db.global.", true, dns.MaxMsgSize/leastSRV + 1},
		{"_p19999._tcp.many.db.global.", false, 1},
	} {
		m := serveOver(t, g, q.qname, dns.TypeSRV, &test.ResponseWriter{TCP: q.tcp})
		if len(m.Answer) == 0 || len(m.Answer) > q.most {
			t.Errorf("%s (TCP %v): made %d SRV records, want 1 to %d", q.qname, q.tcp, len(m.Answer), q.most)
			continue
		}
		if w := m.Answer[0].(*dns.SRV).Weight; q.most > 1 && w != 1 {
			t.Errorf("%s: weight %d, want 1 (100 shared by 20,000)", q.qname, w)
		}
	}
}
