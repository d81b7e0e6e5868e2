package global

import (
	"context"
	"fmt"
	"testing"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// Services bigger than what a reply holds: their answers read no more than a reply holds (see
// bounded_test.go), and must still be the README's.

// bigZoned is the plugin, rotating, with client_locality node (fakeLocator), over db/big: local
// endpoints big-0.. with port http on node n1 (za), the next with port db on n2 (za), and west
// (za, a linked cluster of one endpoint).
func bigZoned(t testing.TB, http, db int) *Global {
	t.Helper()
	big := index.Key{Namespace: "db", Name: "big"}
	httpPort := []index.Port{{Name: "http", Port: 8080, Protocol: "TCP"}}
	var withHTTP, withDB []index.Endpoint
	for i := range http + db {
		e := indextest.Endpoint(fmt.Sprintf("big-%d", i), fmt.Sprintf("10.3.%d.%d", i/250, i%250+1))
		if i < http {
			withHTTP = append(withHTTP, indextest.Placed(e, "za", "n1"))
		} else {
			withDB = append(withDB, indextest.Placed(e, "za", "n2"))
		}
	}
	src := indextest.New()
	var sls []*index.Slice
	for at := 0; at < len(withHTTP); at += 100 {
		sls = append(sls, indextest.Slice(httpPort, withHTTP[at:min(at+100, len(withHTTP))]...))
	}
	if len(withDB) > 0 {
		sls = append(sls, indextest.Slice(dbPort, withDB...))
	}
	src.Add(big, &index.Member{Namespace: "db", Name: "big", Origin: index.Origin{Ports: append(httpPort, dbPort...)}}, sls...)
	src.Add(big, &index.Member{Namespace: "db", Name: "big-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("big-0", "10.96.7.1")))
	ix := index.New(zonedTopology(), src)
	ix.Changed(big)
	ix.Start()
	ix.Publish()
	return &Global{Zones: []string{"global."}, Next: test.NextHandler(dns.RcodeNameError, nil), Answerer: answer.Answerer{Maker: answer.Maker{TTL: 5, Rotate: true},
		Asker: answer.Asker{Sources: contract.Sources{Node: true}, Locator: fakeLocator{}}, Index: ix}}
}

// askUDP sends qname from address from over UDP with an EDNS0 buffer of size bytes, and returns
// the reply as the server sends it: truncated to fit (CoreDNS's ScrubWriter).
func askUDP(t *testing.T, g *Global, from, qname string, qtype uint16, size uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.SetEdns0(size, false)
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: from})
	if _, err := g.ServeDNS(context.Background(), rec, m); err != nil || rec.Msg == nil {
		t.Fatalf("%s: %v %v", qname, err, rec.Msg)
	}
	rec.Msg.Truncate(int(size))
	return rec.Msg
}

// An SRV name of a service holding more records than a reply (of 512 bytes: 100 records are
// read), its port on a few endpoints only, answers those few from every client and as a zonal
// name, as from an unknown one.
func TestSRVOfBigServiceFromEveryClient(t *testing.T) {
	g := bigZoned(t, 120, 3)
	want := func(m *dns.Msg) string {
		return fmt.Sprint(len(m.Answer), " answers, rcode ", dns.RcodeToString[m.Rcode])
	}
	base := want(askUDP(t, g, "", "_db._tcp.big.db.global.", dns.TypeSRV, 512))
	if base != "4 answers, rcode NOERROR" { // three local, one west
		t.Fatalf("from an unknown client: %s", base)
	}
	for _, q := range []struct{ from, qname, want string }{
		{"10.1.0.1", "_db._tcp.big.db.global.", base}, // n1, a known client
		{"10.1.0.3", "_db._tcp.big.db.global.", base}, // n3
		{"", "za.pin._zone._db._tcp.big.db.global.", base},
		{"", "za.prefer._zone._db._tcp.big.db.global.", base},
		{"10.1.0.1", "za.pin._zone._db._tcp.big.db.global.", base},
		{"", "zb.prefer._zone._db._tcp.big.db.global.", base}, // no record in zb: all
		{"", "zb.pin._zone._db._tcp.big.db.global.", "0 answers, rcode NOERROR"},
	} {
		if got := want(askUDP(t, g, q.from, q.qname, dns.TypeSRV, 512)); got != q.want {
			t.Errorf("%s from %q: %s, want %s", q.qname, q.from, got, q.want)
		}
	}
}

// With rotation, every record of a nearest tier bigger than a reply comes first for some queries
// over UDP, from the cluster's view, a client's, and as a zonal name; the tier order holds.
func TestRotationOverBigTiers(t *testing.T) {
	const tier = 150
	g := bigZoned(t, tier, 0)
	for _, q := range []struct{ from, qname string }{
		{"", "big.db.global."},      // the cluster's view: the local tier, then west
		{"", "east.big.db.global."}, // one cluster's
		{"10.1.0.1", "big.db.global."},
		{"", "za.pin._zone.big.db.global."},
	} {
		first := map[string]int{}
		for range 40 * tier {
			m := askUDP(t, g, q.from, q.qname, dns.TypeA, 1232)
			if len(m.Answer) == 0 {
				t.Fatalf("%s from %q: %v", q.qname, q.from, m)
			}
			for _, rr := range m.Answer {
				if a := rr.(*dns.A).A.String(); a == "10.96.7.1" {
					t.Fatalf("%s from %q: west's record before the end of the local tier: %v", q.qname, q.from, rrs(m.Answer))
				}
			}
			first[m.Answer[0].(*dns.A).A.String()]++
		}
		if len(first) != tier {
			t.Errorf("%s from %q: %d of the tier's %d records came first over UDP", q.qname, q.from, len(first), tier)
		}
	}
}
