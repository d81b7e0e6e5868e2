package global

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/test/testkit"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// chaos sends qname TXT in class CH through g.
func chaos(t *testing.T, g *Global, qname string, class uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, dns.TypeTXT)
	m.Question[0].Qclass = class
	rec := dnstest.NewRecorder(&test.ResponseWriter{TCP: true}) // over TCP: all of it, as dig +tcp asks
	if _, err := g.ServeDNS(context.Background(), rec, m); err != nil || rec.Msg == nil {
		t.Fatalf("%s: %v %v", qname, err, rec.Msg)
	}
	// A reply in class CH carries records of class CH only: BIND's dig calls anything else a
	// malformed message.
	for _, rr := range append(append(slices.Clone(rec.Msg.Answer), rec.Msg.Ns...), rec.Msg.Extra...) {
		if h := rr.Header(); h.Rrtype != dns.TypeOPT && h.Class != class {
			t.Errorf("%s: a record of class %s in a reply of class %s: %v", qname, dns.ClassToString[h.Class], dns.ClassToString[class], rr)
		}
	}
	return rec.Msg
}

// txts returns the TXT strings of m's answer, one line per record, with age= and serial= zeroed.
func txts(t *testing.T, m *dns.Msg) []string {
	t.Helper()
	var out []string
	for _, rr := range m.Answer {
		txt, ok := rr.(*dns.TXT)
		if !ok || txt.Hdr.Class != dns.ClassCHAOS {
			t.Fatalf("not a CH TXT: %v", rr)
		}
		words := strings.Fields(strings.Join(txt.Txt, ""))
		for i, w := range words {
			if strings.HasPrefix(w, "age=") || strings.HasPrefix(w, "serial=") || strings.HasPrefix(w, "version=") {
				words[i] = w[:strings.Index(w, "=")+1] + "_"
			}
		}
		out = append(out, strings.Join(words, " "))
	}
	return out
}

func TestExplain(t *testing.T) {
	g := newGlobal(t, source())
	g.Explain = true
	cases := []struct {
		qname string
		rcode int
		lines []string
	}{
		{"foo.db.global.", dns.RcodeSuccess, []string{
			"service=db/foo records=5 left-out=1 synced=true serial=_ age=_ policy=all from=default",
			"addr=10.0.0.1 host=foo-0 cluster=east tier=0 why=local member=db/foo state=ready",
			"addr=10.0.0.2 host=foo-1 cluster=east tier=0 why=local member=db/foo state=ready",
			"addr=10.96.0.1 host=foo-0 cluster=west tier=1 why=zone:z1 member=db/foo-west state=ready",
			"addr=10.96.1.1 host=foo-0 cluster=north tier=2 why=region:r1 member=db/foo-north state=ready",
			"addr=fd00::1 host=foo-0 cluster=west tier=1 why=zone:z1 member=db/foo-west state=ready",
			"addr=10.0.0.3 host=foo-2 cluster=east tier=0 why=local member=db/foo state=not-ready",
		}},
		{"foo-2.east.foo.db.global.", dns.RcodeNameError, []string{
			"service=db/foo records=0 left-out=1 synced=true serial=_ age=_ policy=all from=default exists=false: no ready record here",
			"addr=10.0.0.3 host=foo-2 cluster=east tier=0 why=local member=db/foo state=not-ready",
		}},
		{"_metrics._tcp.west.foo.db.global.", dns.RcodeNameError, []string{
			"exists=false: not a name of this zone: [[<host>.]<cluster>.]<svc>.<ns>, [_<port>.]_<proto>.<svc>.<ns> or their short forms",
		}},
		{"_metrics._tcp.foo.db.global.", dns.RcodeSuccess, []string{
			"service=db/foo records=2 left-out=4 synced=true serial=_ age=_ policy=all from=default",
			"addr=10.0.0.1 host=foo-0 cluster=east tier=0 why=local member=db/foo state=no-matching-port",
			"addr=10.0.0.2 host=foo-1 cluster=east tier=0 why=local member=db/foo state=no-matching-port",
			"addr=10.96.0.1 host=foo-0 cluster=west tier=1 why=zone:z1 member=db/foo-west state=ready port=9000",
			"addr=10.96.1.1 host=foo-0 cluster=north tier=2 why=region:r1 member=db/foo-north state=no-matching-port",
			"addr=fd00::1 host=foo-0 cluster=west tier=1 why=zone:z1 member=db/foo-west state=ready port=9000",
			"addr=10.0.0.3 host=foo-2 cluster=east tier=0 why=local member=db/foo state=not-ready",
		}},
		{"nope.db.global.", dns.RcodeNameError, []string{"exists=false: no global service db/nope"}},
		{"db.global.", dns.RcodeSuccess, []string{"exists=true: an empty non-terminal: namespace db has global services that answer"}},
		{"global.", dns.RcodeSuccess, []string{
			"synced=true services=2 records=7 serial=_ age=_ cluster=east named-by=corefile leader=none leading=false writer=false version=_",
			"cluster=east tier=0 why=local locality=region:r1,zone:z1 from=corefile services=2 ready=2 not-ready=2 terminating=0 gateway-down=0",
			"cluster=west tier=1 why=zone:z1 locality=region:r1,zone:z1 from=corefile services=1 ready=2 not-ready=0 terminating=0 gateway-down=0",
			"cluster=north tier=2 why=region:r1 locality=region:r1,zone:z2 from=corefile services=1 ready=1 not-ready=0 terminating=0 gateway-down=0",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.qname, func(t *testing.T) {
			m := chaos(t, g, tc.qname, dns.ClassCHAOS)
			if m.Rcode != tc.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if got := txts(t, m); !slices.Equal(got, tc.lines) {
				t.Errorf("explanation:\n got %q\nwant %q", got, tc.lines)
			}
			// The IN answer has the same rcode, and never the explanation (MongoDB reads IN TXT).
			in := query(t, g, tc.qname, dns.TypeTXT)
			if in.Rcode != m.Rcode || len(in.Answer) != 0 {
				t.Errorf("IN TXT: %s %v", dns.RcodeToString[in.Rcode], in.Answer)
			}
		})
	}

	// Other classes, and CH with explain off, are refused as CoreDNS does.
	if m := chaos(t, g, "foo.db.global.", dns.ClassHESIOD); m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
		t.Errorf("HS: %s %v", dns.RcodeToString[m.Rcode], m.Answer)
	}
	g.Explain = false
	if m := chaos(t, g, "foo.db.global.", dns.ClassCHAOS); m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
		t.Errorf("explain off: %s %v", dns.RcodeToString[m.Rcode], m.Answer)
	}
}

func TestExplainAmbiguousAndUnsynced(t *testing.T) {
	src := source()
	app := index.Key{Namespace: "app", Name: "foo"}
	src.Add(app, &index.Member{Namespace: "app", Name: "foo", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.0.9.9")))
	g := newGlobal(t, src, app)
	g.Explain = true
	m := chaos(t, g, "foo.global.", dns.ClassCHAOS)
	want := []string{
		"name=foo ambiguous=true namespaces=app,db: ask for foo.<namespace>, or list one in prefer_namespaces",
		"service=app/foo records=1 left-out=0 synced=true serial=_ age=_ policy=all from=default",
		"service=db/foo records=5 left-out=1 synced=true serial=_ age=_ policy=all from=default",
	}
	if got := txts(t, m); m.Rcode != dns.RcodeNameError || !slices.Equal(got, want) {
		t.Errorf("ambiguous: %s\n got %q\nwant %q", dns.RcodeToString[m.Rcode], got, want)
	}

	ix := index.New(indextest.Topology(), source())
	g = &Global{Zones: []string{"global."}, Answerer: answer.Answerer{Maker: answer.Maker{TTL: 5}, Explain: true, Index: ix}}
	m = chaos(t, g, "foo.db.global.", dns.ClassCHAOS)
	if got := txts(t, m); m.Rcode != dns.RcodeServerFailure || len(got) != 1 || !strings.HasPrefix(got[0], "synced=false") {
		t.Errorf("unsynced: %s %q", dns.RcodeToString[m.Rcode], got)
	}
}

// Addresses rotate within each tier, never across: over many queries each address of the nearest
// tier comes first about equally often.
func TestRotationWithinTiers(t *testing.T) {
	src := indextest.New()
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.0.0.1"), indextest.Endpoint("foo-1", "10.0.0.2"), indextest.Endpoint("foo-2", "10.0.0.3")))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.96.0.1")))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-north", Origin: index.Origin{Cluster: "north", Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.96.1.1"), indextest.Endpoint("foo-1", "10.96.1.2")))
	g := newGlobal(t, src)
	g.Rotate = true
	// A tier of one record between two larger ones: tiers end where they end, whatever their size.
	tiers := [][]string{{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, {"10.96.0.1"}, {"10.96.1.1", "10.96.1.2"}}
	first := map[string]int{}
	const queries = 3000
	for range queries {
		var got []string
		for _, rr := range query(t, g, "foo.db.global.", dns.TypeA).Answer {
			got = append(got, rr.(*dns.A).A.String())
		}
		at := 0
		for _, tier := range tiers {
			if len(got) < at+len(tier) || !testkit.SameSet(got[at:at+len(tier)], tier) {
				t.Fatalf("tier order broken: %v", got)
			}
			at += len(tier)
		}
		first[got[0]]++
	}
	for _, a := range tiers[0] {
		if n := first[a]; n < queries/3*7/10 || n > queries/3*13/10 {
			t.Errorf("%s first %d times of %d: %v", a, n, queries, first)
		}
	}
	g.Rotate = false
	for range 10 {
		if got := query(t, g, "foo.db.global.", dns.TypeA).Answer[0].(*dns.A).A.String(); got != "10.0.0.1" {
			t.Fatalf("rotate off: first %s", got)
		}
	}
}

// RFC 8020: nothing exists below a name that does not; an empty non-terminal exists only above a
// name that answers.
func TestNegativeAnswersRFC8020(t *testing.T) {
	src := source()
	quiet := index.Key{Namespace: "idle", Name: "quiet"}
	src.Add(quiet, &index.Member{Namespace: "idle", Name: "quiet", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.NotReady(indextest.Endpoint("quiet-0", "10.0.2.1"))))
	g := newGlobal(t, src, quiet)
	for _, tc := range []struct {
		qname string
		rcode int
	}{
		{"db.global.", dns.RcodeSuccess},     // foo answers there
		{"idle.global.", dns.RcodeNameError}, // its only service has no ready record
		{"quiet.idle.global.", dns.RcodeNameError},
		{"_tcp.foo.db.global.", dns.RcodeSuccess}, // above _db._tcp.foo.db.global
		{"_udp.foo.db.global.", dns.RcodeNameError},
		{"_udp.foo.global.", dns.RcodeNameError},
		{"_tcp.west.foo.db.global.", dns.RcodeNameError},
		{"_tcp.quiet.idle.global.", dns.RcodeNameError},
	} {
		if m := query(t, g, tc.qname, dns.TypeSRV); m.Rcode != tc.rcode {
			t.Errorf("%s: %s, want %s", tc.qname, dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
		}
	}
}
