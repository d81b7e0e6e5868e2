package global

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

var (
	foo    = index.Key{Namespace: "db", Name: "foo"}
	dbPort = []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
)

// source: db/foo = local foo-0, foo-1 (+ foo-2 not ready), west foo-0 (IPv4 and IPv6), north foo-0;
// db/empty has no ready endpoint; app/foo makes the short name foo ambiguous when present.
func source() *indextest.Source {
	src := indextest.New()
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort,
			indextest.Endpoint("foo-1", "10.0.0.2"),
			indextest.Endpoint("foo-0", "10.0.0.1"),
			indextest.NotReady(indextest.Endpoint("foo-2", "10.0.0.3"))))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: []index.Port{
		{Name: "db", Port: 5432, Protocol: "TCP"}, {Name: "metrics", Port: 9000, Protocol: "TCP"}}}},

		indextest.Slice([]index.Port{{Name: "db", Port: 15432, Protocol: "TCP"}, {Name: "metrics", Port: 19000, Protocol: "TCP"}},
			indextest.Endpoint("foo-0", "10.96.0.1")),
		indextest.Slice([]index.Port{{Name: "db", Port: 15432, Protocol: "TCP"}, {Name: "metrics", Port: 19000, Protocol: "TCP"}},
			indextest.Endpoint("foo-0", "fd00::1")))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-north", Origin: index.Origin{Cluster: "north", Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.96.1.1")))
	empty := index.Key{Namespace: "db", Name: "empty"}
	src.Add(empty, &index.Member{Namespace: "db", Name: "empty", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.NotReady(indextest.Endpoint("empty-0", "10.0.1.1"))))
	return src
}

func newGlobal(t testing.TB, src index.Source, keys ...index.Key) *Global {
	t.Helper()
	ix := index.New(indextest.Topology(), src)
	for _, k := range append(keys, foo, index.Key{Namespace: "db", Name: "empty"}) {
		ix.Changed(k)
	}
	ix.Start()
	ix.Publish()
	return &Global{Zones: []string{"global."}, Next: test.NextHandler(dns.RcodeNameError, nil), Answerer: answer.Answerer{Maker: answer.Maker{TTL: 5}, Index: ix}}
}

// serve sends one query through g over UDP and returns what g wrote, nil when it wrote nothing.
func serve(t *testing.T, g *Global, qname string, qtype uint16) *dns.Msg {
	t.Helper()
	return serveOver(t, g, qname, qtype, &test.ResponseWriter{})
}

// serveOver is serve over w's transport.
func serveOver(t *testing.T, g *Global, qname string, qtype uint16, w dns.ResponseWriter) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.SetEdns0(4096, false)
	rec := dnstest.NewRecorder(w)
	if _, err := g.ServeDNS(context.Background(), rec, m); err != nil {
		t.Fatalf("%s: %v", qname, err)
	}
	return rec.Msg
}

func query(t *testing.T, g *Global, qname string, qtype uint16) *dns.Msg {
	t.Helper()
	m := serve(t, g, qname, qtype)
	if m == nil {
		t.Fatalf("%s: no reply written", qname)
	}
	return m
}

// rrs renders a section without TTL-independent noise, in order.
func rrs(section []dns.RR) []string {
	var out []string
	for _, rr := range section {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		s := rr.String()
		if soa, ok := rr.(*dns.SOA); ok {
			s = "SOA " + soa.Hdr.Name + " " + soa.Ns
		}
		out = append(out, strings.ReplaceAll(s, "\t", " "))
	}
	return out
}

func TestAnswers(t *testing.T) {
	g := newGlobal(t, source())
	const soa = "SOA global. ns1.dns.global."
	cases := []struct {
		qname  string
		qtype  uint16
		rcode  int
		answer []string
		ns     []string
		extra  []string
	}{
		{"foo.db.global.", dns.TypeA, dns.RcodeSuccess, []string{
			"foo.db.global. 5 IN A 10.0.0.1",
			"foo.db.global. 5 IN A 10.0.0.2",
			"foo.db.global. 5 IN A 10.96.0.1",
			"foo.db.global. 5 IN A 10.96.1.1"}, nil, nil},
		// Short name, and the question's case is kept.
		{"FoO.GlObAl.", dns.TypeA, dns.RcodeSuccess, []string{
			"FoO.GlObAl. 5 IN A 10.0.0.1",
			"FoO.GlObAl. 5 IN A 10.0.0.2",
			"FoO.GlObAl. 5 IN A 10.96.0.1",
			"FoO.GlObAl. 5 IN A 10.96.1.1"}, nil, nil},
		{"foo.db.global.", dns.TypeAAAA, dns.RcodeSuccess, []string{"foo.db.global. 5 IN AAAA fd00::1"}, nil, nil},
		{"west.foo.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"west.foo.db.global. 5 IN A 10.96.0.1"}, nil, nil},
		{"east.foo.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"east.foo.db.global. 5 IN A 10.0.0.1", "east.foo.db.global. 5 IN A 10.0.0.2"}, nil, nil},
		{"foo-1.east.foo.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"foo-1.east.foo.db.global. 5 IN A 10.0.0.2"}, nil, nil},
		// NODATA: the name exists, not with this type.
		{"north.foo.db.global.", dns.TypeAAAA, dns.RcodeSuccess, nil, []string{soa}, nil},
		{"foo.db.global.", dns.TypeTXT, dns.RcodeSuccess, nil, []string{soa}, nil},
		// NXDOMAIN: unknown names, not-ready pods, members without ready endpoints.
		{"bar.db.global.", dns.TypeA, dns.RcodeNameError, nil, []string{soa}, nil},
		{"foo-2.east.foo.db.global.", dns.TypeA, dns.RcodeNameError, nil, []string{soa}, nil},
		{"south.foo.db.global.", dns.TypeA, dns.RcodeNameError, nil, []string{soa}, nil},
		{"empty.db.global.", dns.TypeA, dns.RcodeNameError, nil, []string{soa}, nil},
		{"a.b.c.d.e.global.", dns.TypeA, dns.RcodeNameError, nil, []string{soa}, nil},
		// A namespace alone is an empty non-terminal.
		{"db.global.", dns.TypeA, dns.RcodeSuccess, nil, []string{soa}, nil},
		// SRV: priority = tier, weights shared within a tier, Service ports, glue.
		{"_db._tcp.foo.db.global.", dns.TypeSRV, dns.RcodeSuccess, []string{
			"_db._tcp.foo.db.global. 5 IN SRV 0 50 5432 foo-0.east.foo.db.global.",
			"_db._tcp.foo.db.global. 5 IN SRV 0 50 5432 foo-1.east.foo.db.global.",
			"_db._tcp.foo.db.global. 5 IN SRV 1 100 5432 foo-0.west.foo.db.global.",
			"_db._tcp.foo.db.global. 5 IN SRV 2 100 5432 foo-0.north.foo.db.global."}, nil, []string{
			"foo-0.east.foo.db.global. 5 IN A 10.0.0.1",
			"foo-1.east.foo.db.global. 5 IN A 10.0.0.2",
			"foo-0.west.foo.db.global. 5 IN A 10.96.0.1",
			"foo-0.west.foo.db.global. 5 IN AAAA fd00::1",
			"foo-0.north.foo.db.global. 5 IN A 10.96.1.1"}},
		{"_metrics._tcp.foo.global.", dns.TypeSRV, dns.RcodeSuccess, []string{
			"_metrics._tcp.foo.global. 5 IN SRV 1 100 9000 foo-0.west.foo.db.global."}, nil, []string{
			"foo-0.west.foo.db.global. 5 IN A 10.96.0.1",
			"foo-0.west.foo.db.global. 5 IN AAAA fd00::1"}},
		{"west.foo.db.global.", dns.TypeSRV, dns.RcodeSuccess, []string{
			"west.foo.db.global. 5 IN SRV 1 50 5432 foo-0.west.foo.db.global.",
			"west.foo.db.global. 5 IN SRV 1 50 9000 foo-0.west.foo.db.global."}, nil, []string{
			"foo-0.west.foo.db.global. 5 IN A 10.96.0.1",
			"foo-0.west.foo.db.global. 5 IN AAAA fd00::1"}},
		{"_db._udp.foo.db.global.", dns.TypeSRV, dns.RcodeNameError, nil, []string{soa}, nil},
		{"_nope._tcp.foo.db.global.", dns.TypeSRV, dns.RcodeNameError, nil, []string{soa}, nil},
		{"_db._tcp.foo.db.global.", dns.TypeA, dns.RcodeSuccess, nil, []string{soa}, nil},
		{"_tcp.foo.db.global.", dns.TypeSRV, dns.RcodeSuccess, nil, []string{soa}, nil},
		// The apex.
		{"global.", dns.TypeSOA, dns.RcodeSuccess, []string{soa}, nil, nil},
		{"global.", dns.TypeNS, dns.RcodeSuccess, []string{"global. 5 IN NS ns1.dns.global."}, nil, nil},
		{"global.", dns.TypeA, dns.RcodeSuccess, nil, []string{soa}, nil},
		{"dns.global.", dns.TypeA, dns.RcodeSuccess, nil, []string{soa}, nil},
		// ANY: the addresses (RFC 8482 allows a subset); unknown types: NODATA.
		{"west.foo.db.global.", dns.TypeANY, dns.RcodeSuccess, []string{"west.foo.db.global. 5 IN A 10.96.0.1", "west.foo.db.global. 5 IN AAAA fd00::1"}, nil, nil},
		{"foo.db.global.", 65000, dns.RcodeSuccess, nil, []string{soa}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.qname+"/"+dns.TypeToString[tc.qtype], func(t *testing.T) {
			m := query(t, g, tc.qname, tc.qtype)
			if m.Rcode != tc.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if !m.Authoritative {
				t.Error("not authoritative")
			}
			for _, s := range []struct {
				name      string
				got, want []string
			}{{"answer", rrs(m.Answer), tc.answer}, {"authority", rrs(m.Ns), tc.ns}, {"additional", rrs(m.Extra), tc.extra}} {
				if !slices.Equal(s.got, s.want) {
					t.Errorf("%s:\n got %q\nwant %q", s.name, s.got, s.want)
				}
			}
		})
	}
}

func TestRefusedAndNotImplemented(t *testing.T) {
	g := newGlobal(t, source())
	for _, qtype := range []uint16{dns.TypeAXFR, dns.TypeIXFR} {
		if m := query(t, g, "global.", qtype); m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
			t.Errorf("%s: %s, want REFUSED", dns.TypeToString[qtype], dns.RcodeToString[m.Rcode])
		}
	}
	r := new(dns.Msg)
	r.SetNotify("global.")
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	if _, err := g.ServeDNS(context.Background(), rec, r); err != nil || rec.Msg == nil || rec.Msg.Rcode != dns.RcodeNotImplemented {
		t.Errorf("NOTIFY: %v %v, want NOTIMP", err, rec.Msg)
	}
}

func TestAmbiguousShortName(t *testing.T) {
	src := source()
	app := index.Key{Namespace: "app", Name: "foo"}
	src.Add(app, &index.Member{Namespace: "app", Name: "foo", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.0.9.9")))
	g := newGlobal(t, src, app)

	m := serveOver(t, g, "foo.global.", dns.TypeA, &test.ResponseWriter{TCP: true})
	if m.Rcode != dns.RcodeNameError || len(m.Answer) != 0 || len(m.Ns) != 1 || !m.Authoritative {
		t.Fatalf("rcode %s with %d answers, %d authority, want an authoritative NXDOMAIN with the SOA", dns.RcodeToString[m.Rcode], len(m.Answer), len(m.Ns))
	}
	var ede *dns.EDNS0_EDE
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				ede = e
			}
		}
	}
	if ede == nil || !strings.Contains(ede.ExtraText, "app, db") {
		t.Fatalf("EDE %v: want one naming the candidates app, db", ede)
	}
	// Over UDP, the SOA and the EDE are three times the query: TC, and the client asks over TCP.
	if m := query(t, g, "foo.global.", dns.TypeA); m.Rcode != dns.RcodeNameError || !m.Truncated || len(m.Ns) != 0 {
		t.Errorf("over UDP: %s TC %t with %d authority, want NXDOMAIN, TC, none", dns.RcodeToString[m.Rcode], m.Truncated, len(m.Ns))
	}
	// The full names still work, and prefer_namespaces makes the short name deterministic.
	if m := query(t, g, "foo.app.global.", dns.TypeA); len(m.Answer) != 1 {
		t.Errorf("foo.app.global: %v", m.Answer)
	}
	// Never passed on by fallthrough: the name exists, it is ambiguous.
	g.Fall = fall.F{Zones: []string{"global."}}
	if m := serve(t, g, "foo.global.", dns.TypeA); m == nil || m.Rcode != dns.RcodeNameError || m.IsEdns0() == nil {
		t.Errorf("with fallthrough: %v, want our NXDOMAIN with the EDE", m)
	}
	g.Fall = fall.F{}

	// A namespace called foo whose services answer makes foo.global an empty non-terminal: NODATA.
	bar := index.Key{Namespace: "foo", Name: "bar"}
	src.Add(bar, &index.Member{Namespace: "foo", Name: "bar", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("bar-0", "10.0.8.8")))
	g = newGlobal(t, src, app, bar)
	if m := serveOver(t, g, "foo.global.", dns.TypeA, &test.ResponseWriter{TCP: true}); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 || len(m.Ns) != 1 {
		t.Errorf("ambiguous and a namespace: %s %v, want NODATA", dns.RcodeToString[m.Rcode], m.Answer)
	}

	g.PreferNamespaces = []string{"other", "db"}
	if m := query(t, g, "foo.global.", dns.TypeA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 4 {
		t.Errorf("with prefer_namespaces db: rcode %s, %d answers, want db's 4", dns.RcodeToString[m.Rcode], len(m.Answer))
	}
}

// No name makes the plugin an amplifier: a short name of 100 namespaces of 63 characters each
// answers, over UDP, no more than three times the query (or TC with no records), and over TCP an
// Extended DNS Error naming four of them.
func TestAmbiguousNotAnAmplifier(t *testing.T) {
	src := indextest.New()
	var keys []index.Key
	for i := range 100 {
		ns := fmt.Sprintf("%02d%s", i, strings.Repeat("n", 61))
		k := index.Key{Namespace: ns, Name: "redis"}
		src.Add(k, &index.Member{Namespace: ns, Name: "redis", Origin: index.Origin{Ports: dbPort}},
			indextest.Slice(dbPort, indextest.Endpoint("redis-0", fmt.Sprintf("10.0.%d.1", i))))
		keys = append(keys, k)
	}
	g := newGlobal(t, src, keys...)
	for _, size := range []uint16{512, 1232, 4096} {
		req := new(dns.Msg)
		req.SetQuestion("redis.global.", dns.TypeA)
		req.SetEdns0(size, false)
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		g.ServeDNS(context.Background(), rec, req)
		if got, most := rec.Msg.Len(), 3*req.Len(); got > most || rec.Msg.Rcode != dns.RcodeNameError || len(rec.Msg.Ns) > 0 && !rec.Msg.Truncated {
			t.Errorf("UDP/%d: %d bytes (%s, TC %t) for a query of %d, want at most %d", size, got, dns.RcodeToString[rec.Msg.Rcode], rec.Msg.Truncated, req.Len(), most)
		}
	}
	m := serveOver(t, g, "redis.global.", dns.TypeA, &test.ResponseWriter{TCP: true})
	want := "global: redis is ambiguous, it exists in namespaces 00" + strings.Repeat("n", 61) + ", 01" + strings.Repeat("n", 61) +
		", 02" + strings.Repeat("n", 61) + ", 03" + strings.Repeat("n", 61) + " and 96 more: ask for redis.<namespace>.global."
	if o := m.IsEdns0(); o == nil || len(o.Option) != 1 || o.Option[0].(*dns.EDNS0_EDE).ExtraText != want || m.Truncated {
		t.Errorf("over TCP: %v, want the EDE %q", m, want)
	}
}

func TestNotSyncedIsServfail(t *testing.T) {
	ix := index.New(indextest.Topology(), source())
	ix.Changed(foo)
	g := &Global{Zones: []string{"global."}, Answerer: answer.Answerer{Maker: answer.Maker{TTL: 5}, Index: ix}}
	m := query(t, g, "foo.db.global.", dns.TypeA)
	if m.Rcode != dns.RcodeServerFailure {
		t.Errorf("before sync: rcode %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
	if m := query(t, g, "global.", dns.TypeSOA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("the apex is answered before sync: %v", m)
	}
}

func TestFallthrough(t *testing.T) {
	g := newGlobal(t, source())
	// By default nothing in the zone reaches the next plugin.
	if m := query(t, g, "bar.db.global.", dns.TypeA); m.Rcode != dns.RcodeNameError || len(m.Ns) != 1 {
		t.Errorf("without fallthrough: %v", m)
	}
	g.Fall = fall.F{}
	g.Fall.SetZonesFromArgs(nil)
	next := false
	g.Next = test.HandlerFunc(func(context.Context, dns.ResponseWriter, *dns.Msg) (int, error) {
		next = true
		return dns.RcodeNameError, nil
	})
	for _, c := range []struct {
		qname string
		qtype uint16
		next  bool
	}{
		{"bar.db.global.", dns.TypeA, true},    // NXDOMAIN falls through
		{"foo.db.global.", dns.TypeTXT, false}, // NODATA does not
		{"foo.db.global.", dns.TypeA, false},   // answers do not
		{"example.org.", dns.TypeA, true},      // outside the zones: always the next plugin
	} {
		next = false
		if m := serve(t, g, c.qname, c.qtype); next != c.next || (m == nil) == !next {
			t.Errorf("%s %s: next plugin called %v, want %v (reply %v)", c.qname, dns.TypeToString[c.qtype], next, c.next, m)
		}
	}
}
