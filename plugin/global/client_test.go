package global

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// zoned is a cluster spread over zones za and zb of region r1: db/zz has zz-0 on node n1 and zz-1
// on n2 (za), zz-2 on n3 (zb), and linked clusters west (za), north (zc, r1) and south (r9).
var zz = index.Key{Namespace: "db", Name: "zz"}

func zonedTopology() *index.Topology {
	return &index.Topology{
		Local: "east", Keys: index.DefaultKeys, ClientKeys: index.DefaultClientKeys,
		Locality: map[string]map[string]string{
			"east":  {index.RegionKey: "r1"},
			"west":  {index.ZoneKey: "za", index.RegionKey: "r1"},
			"north": {index.ZoneKey: "zc", index.RegionKey: "r1"},
			"south": {index.ZoneKey: "z9", index.RegionKey: "r9"},
		},
	}
}

func zonedSource() *indextest.Source {
	src := indextest.New()
	src.Add(zz, &index.Member{Namespace: "db", Name: "zz", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort,
			indextest.Placed(indextest.Endpoint("zz-0", "10.0.0.1"), "za", "n1"),
			indextest.Placed(indextest.Endpoint("zz-1", "10.0.0.2"), "za", "n2"),
			indextest.Placed(indextest.Endpoint("zz-2", "10.0.0.3"), "zb", "n3"),
			indextest.NotReady(indextest.Placed(indextest.Endpoint("zz-3", "10.0.0.4"), "za", "n1"))))
	for i, c := range []string{"west", "north", "south"} {
		src.Add(zz, &index.Member{Namespace: "db", Name: "zz-" + c, Origin: index.Origin{Cluster: c, Ports: dbPort}},
			indextest.Slice(dbPort, indextest.Endpoint("zz-0", "10.96."+string(rune('1'+i))+".1")))
	}
	return src
}

// fakeLocator: Nodes n1 (za) at 10.1.0.1 with pod CIDR 10.244.1.0/24, n3 (zb) at 10.1.0.3, the pod
// 10.244.3.7 on n3, and a forwarder at 10.1.9.9, with ecs also a Service of client_ecs_from.
type fakeLocator struct{ ecs bool }

var (
	n1 = &index.Client{Node: "n1", Labels: map[string]string{index.ZoneKey: "za", index.RegionKey: "r1"}}
	n3 = &index.Client{Node: "n3", Labels: map[string]string{index.ZoneKey: "zb", index.RegionKey: "r1"}}
)

var (
	fakeNodes     = map[netip.Addr]*index.Client{netip.MustParseAddr("10.1.0.1"): n1, netip.MustParseAddr("10.1.0.3"): n3}
	fakePod       = netip.MustParseAddr("10.244.3.7")
	fakeCIDR      = netip.MustParsePrefix("10.244.1.0/24")
	fakeForwarder = netip.MustParseAddr("10.1.9.9")
)

func (fakeLocator) Node(a netip.Addr) *index.Client { return fakeNodes[a] }

func (fakeLocator) Pod(p netip.Prefix) (*index.Client, int) {
	if p.IsSingleIP() && p.Addr() == fakePod {
		return n3, 32
	}
	if p.Bits() >= fakeCIDR.Bits() && fakeCIDR.Contains(p.Addr()) {
		return n1, fakeCIDR.Bits()
	}
	return nil, 0
}

func (fakeLocator) Forwarder(a netip.Addr) bool { return a == fakeForwarder }

// ECSSource: with ecs, the forwarder is also a Service of client_ecs_from (it sets the option).
func (f fakeLocator) ECSSource(a netip.Addr) bool { return f.ecs && a == fakeForwarder }

// zonedGlobal is the plugin over zonedSource, not rotating, with client_locality sources.
func zonedGlobal(t testing.TB, sources contract.Sources) *Global {
	t.Helper()
	ix := index.New(zonedTopology(), zonedSource())
	ix.Changed(zz)
	ix.Start()
	ix.Publish()
	g := &Global{Zones: []string{"global.", "near.global.", "clusterset.local."}, Next: test.NextHandler(dns.RcodeNameError, nil),
		Answerer: answer.Answerer{Maker: answer.Maker{TTL: 5}, Explain: true, Index: ix, Asker: answer.Asker{Sources: sources},
			Chooser: answer.Chooser{Policies: answer.PoliciesOf(map[string]index.Policy{"near.global.": {Nearest: 1}}), MCSZones: []string{"clusterset.local."}}}}
	if sources != (contract.Sources{}) {
		g.Locator = fakeLocator{ecs: sources.ECS}
	}
	return g
}

// ask sends qname from address from, with an ECS option of ecs (a prefix) when not "", and
// returns the reply.
func ask(t *testing.T, g *Global, from, ecs, qname string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	withECS(m, ecs)
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: from})
	if _, err := g.ServeDNS(context.Background(), rec, m); err != nil || rec.Msg == nil {
		t.Fatalf("%s: %v %v", qname, err, rec.Msg)
	}
	return rec.Msg
}

// answered renders an answer's A records and SRV records' priority and target, in order.
func answered(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.SRV:
			out = append(out, string(rune('0'+rr.Priority))+" "+strings.TrimSuffix(rr.Target, ".zz.db.global."))
		}
	}
	return out
}

// scope returns the reply's ECS scope, -1 without an ECS option.
func scope(m *dns.Msg) int {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_SUBNET); ok {
				return int(e.SourceScope)
			}
		}
	}
	return -1
}

// From a known node, the answer is the client's view: its node, its zone (this cluster's and a
// linked cluster's endpoints in it), the rest of this cluster, its region, the rest. Unknown
// sources and forwarders get the cluster's view, byte for byte.
func TestClientRankedAnswers(t *testing.T) {
	plain := zonedGlobal(t, contract.Sources{})
	g := zonedGlobal(t, contract.Sources{ECS: true, Node: true, Pod: true})
	const name = "zz.db.global."
	// The cluster's view: east has no zone of its own (its Nodes are in two), so west and north
	// are both in its region only.
	cluster := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.96.2.1", "10.96.1.1", "10.96.3.1"}
	fromN1 := []string{"10.0.0.1", "10.0.0.2", "10.96.1.1", "10.0.0.3", "10.96.2.1", "10.96.3.1"}
	fromN3 := []string{"10.0.0.3", "10.0.0.1", "10.0.0.2", "10.96.2.1", "10.96.1.1", "10.96.3.1"}
	for _, tc := range []struct {
		what, from, ecs string
		want            []string
		scope           int
	}{
		{"no source", "10.7.7.7", "", cluster, -1},
		{"node n1", "10.1.0.1", "", fromN1, -1},
		{"node n3", "10.1.0.3", "", fromN3, -1},
		{"pod on n3", "10.244.3.7", "", fromN3, -1},
		{"pod in n1's CIDR", "10.244.1.99", "", fromN1, -1},
		{"a forwarder", "10.1.9.9", "", cluster, -1},
		{"a forwarder with ECS of a pod on n1", "10.1.9.9", "10.244.1.7/32", fromN1, 24},
		{"a forwarder with ECS of n1's pod CIDR", "10.1.9.9", "10.244.1.0/24", fromN1, 24},
		{"a forwarder with ECS of node n3", "10.1.9.9", "10.1.0.3/32", fromN3, 32},
		{"a forwarder with ECS of no client", "10.1.9.9", "10.9.0.0/16", cluster, 16},
		// The option from anyone else is ignored, not echoed: the source decides.
		{"a pod on n3 with ECS of node n1", "10.244.3.7", "10.1.0.1/32", fromN3, -1},
		{"node n3 with ECS of n1's pod CIDR", "10.1.0.3", "10.244.1.0/24", fromN3, -1},
		{"no source with ECS of node n1", "10.7.7.7", "10.1.0.1/32", cluster, -1},
	} {
		m := ask(t, g, tc.from, tc.ecs, name, dns.TypeA)
		if got := answered(m); !slices.Equal(got, tc.want) || scope(m) != tc.scope {
			t.Errorf("%s: %q scope %d, want %q scope %d", tc.what, got, scope(m), tc.want, tc.scope)
		}
		if !slices.Equal(tc.want, cluster) {
			continue
		}
		// The cluster's view is today's answer: the same bytes but the ECS option.
		want := ask(t, plain, tc.from, "", name, dns.TypeA)
		m.Extra, m.Id = want.Extra, want.Id
		if a, b := pack(t, m), pack(t, want); !slices.Equal(a, b) {
			t.Errorf("%s: the cluster's view differs from the plugin's without client_locality:\n%v\n%v", tc.what, m, want)
		}
	}
	// client_ecs_from trusts more sources with the option.
	trusting := zonedGlobal(t, contract.Sources{ECS: true, Node: true})
	trusting.ECSFrom, trusting.Locator = answer.Networks{netip.MustParsePrefix("10.7.0.0/16")}, fakeLocator{}
	if m := ask(t, trusting, "10.7.7.7", "10.1.0.1/32", name, dns.TypeA); !slices.Equal(answered(m), fromN1) || scope(m) != 32 {
		t.Errorf("ECS from a network of client_ecs_from: %q scope %d", answered(m), scope(m))
	}
	// A forwarder that is no source of client_ecs_from: its option is ignored (a shared cache
	// passing a client's along would serve that client's answer to all).
	if m := ask(t, trusting, "10.1.9.9", "10.1.0.1/32", name, dns.TypeA); !slices.Equal(answered(m), cluster) || scope(m) != -1 {
		t.Errorf("ECS from a forwarder not in client_ecs_from: %q scope %d", answered(m), scope(m))
	}
	// A source not enabled is not asked.
	nodeOnly := zonedGlobal(t, contract.Sources{Node: true})
	if got := answered(ask(t, nodeOnly, "10.244.3.7", "10.1.0.1/32", name, dns.TypeA)); !slices.Equal(got, cluster) {
		t.Errorf("pod and ecs off: %q", got)
	}
	// SRV priorities are the client's tiers; a nearest policy cuts at them.
	if got, want := answered(ask(t, g, "10.1.0.1", "", "_db._tcp."+name, dns.TypeSRV)),
		[]string{"0 zz-0.east", "1 zz-1.east", "1 zz-0.west", "2 zz-2.east", "3 zz-0.north", "4 zz-0.south"}; !slices.Equal(got, want) {
		t.Errorf("SRV from n1: %q, want %q", got, want)
	}
	if got := answered(ask(t, g, "10.1.0.3", "", "zz.db.near.global.", dns.TypeA)); !slices.Equal(got, []string{"10.0.0.3"}) {
		t.Errorf("nearest from n3: %q", got)
	}
	// No record: nothing depends on who asks.
	if m := ask(t, g, "10.1.9.9", "10.244.1.7/32", "nope.db.global.", dns.TypeA); m.Rcode != dns.RcodeNameError || scope(m) != 0 {
		t.Errorf("NXDOMAIN with ECS: %s scope %d", dns.RcodeToString[m.Rcode], scope(m))
	}
}

func pack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The explanation says whom an answer is ranked from, and each record's tier from there.
func TestExplainClient(t *testing.T) {
	g := zonedGlobal(t, contract.Sources{Node: true})
	m := new(dns.Msg)
	m.SetQuestion("zz.db.near.global.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.1.0.1", TCP: true}) // all of it
	g.ServeDNS(context.Background(), rec, m)
	want := []string{
		"service=db/zz records=1 left-out=6 synced=true serial=_ age=_ policy=nearest from=zone client=node:n1,zone:za,region:r1 client-from=node",
		"tier=0 clusters=east ready=1 answered=true",
		"tier=1 clusters=east,west ready=2 answered=false why=nearer-tiers-hold-1",
		"tier=2 clusters=east ready=1 answered=false why=nearer-tiers-hold-1",
		"tier=3 clusters=north ready=1 answered=false why=nearer-tiers-hold-1",
		"tier=4 clusters=south ready=1 answered=false why=nearer-tiers-hold-1",
		"addr=10.0.0.1 host=zz-0 cluster=east tier=0 why=node:n1 member=db/zz state=ready",
		"addr=10.0.0.2 host=zz-1 cluster=east tier=1 why=zone:za member=db/zz state=beyond-nearest",
		"addr=10.96.1.1 host=zz-0 cluster=west tier=1 why=zone:za member=db/zz-west state=beyond-nearest",
		"addr=10.0.0.3 host=zz-2 cluster=east tier=2 why=cluster member=db/zz state=beyond-nearest",
		"addr=10.96.2.1 host=zz-0 cluster=north tier=3 why=region:r1 member=db/zz-north state=beyond-nearest",
		"addr=10.96.3.1 host=zz-0 cluster=south tier=4 why=none member=db/zz-south state=beyond-nearest",
		"addr=10.0.0.4 host=zz-3 cluster=east tier=0 why=node:n1 member=db/zz state=not-ready",
	}
	if got := txts(t, rec.Msg); !slices.Equal(got, want) {
		t.Errorf("explanation:\n got %q\nwant %q", got, want)
	}
	rec = dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.7.7.7", TCP: true})
	g.ServeDNS(context.Background(), rec, m)
	if got := txts(t, rec.Msg); !strings.HasSuffix(got[0], " client=unknown") {
		t.Errorf("unknown client: %q", got[0])
	}
}

// An explanation asked with an ECS option (linkerd global explain --from) is of the client at that
// address: as its own query is answered (a Node's, a Pod's, a forwarder's address), else as a
// trusted resolver's option for it is (a Node's pod CIDR); the option is taken from any source
// explain_from trusts, and only for explanations.
func TestExplainAs(t *testing.T) {
	for _, tc := range []struct {
		sources    contract.Sources
		ecs, first string
	}{
		{contract.Sources{Node: true, Pod: true}, "10.1.0.1/32", "client=node:n1,zone:za,region:r1 client-from=node"},
		{contract.Sources{Node: true, Pod: true}, "10.244.3.7/32", "client=node:n3,zone:zb,region:r1 client-from=pod"},
		{contract.Sources{Node: true, Pod: true}, "10.1.9.9/32", "client=unknown"},
		{contract.Sources{Node: true, Pod: true}, "10.244.1.5/32", "client=node:n1,zone:za,region:r1 client-from=pod"},
		{contract.Sources{ECS: true, Node: true}, "10.244.1.5/32", "client=node:n1,zone:za,region:r1 client-from=ecs"},
		{contract.Sources{ECS: true}, "10.1.0.3/32", "client=node:n3,zone:zb,region:r1 client-from=ecs"},
		{contract.Sources{ECS: true}, "10.9.9.9/32", "client=unknown"},
		{contract.Sources{}, "10.1.0.1/32", "policy=nearest from=zone"},
	} {
		g := zonedGlobal(t, tc.sources)
		g.ExplainFrom = answer.Networks{netip.MustParsePrefix("127.0.0.0/8")}
		m := explainAs(t, g, "127.0.0.1", tc.ecs)
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
			t.Fatalf("%+v, ECS %s: %s", tc.sources, tc.ecs, m)
		}
		if first := txts(t, m)[0]; !strings.HasSuffix(first, tc.first) || scope(m) != -1 {
			t.Errorf("%+v, ECS %s: %q (ECS scope %d), want it to end %q and no ECS option", tc.sources, tc.ecs, first, scope(m), tc.first)
		}
	}
	// The option is no claim from a source explain_from does not trust, nor in class IN.
	g := zonedGlobal(t, contract.Sources{Node: true, Pod: true})
	g.ExplainFrom = answer.Networks{netip.MustParsePrefix("127.0.0.0/8")}
	if m := explainAs(t, g, "10.7.7.7", "10.1.0.1/32"); m.Rcode != dns.RcodeRefused {
		t.Errorf("CH TXT with ECS from an untrusted source: %s", dns.RcodeToString[m.Rcode])
	}
	if got := answered(ask(t, g, "127.0.0.1", "10.1.0.3/32", "zz.db.global.", dns.TypeA)); !slices.Equal(got, answered(ask(t, g, "127.0.0.1", "", "zz.db.global.", dns.TypeA))) {
		t.Errorf("an A query with ECS from a source trusted to explain is answered as from the ECS address: %q", got)
	}
}

// explainAs asks, from address from over TCP, for the explanation of zz.db.near.global. with an
// ECS option of prefix ecs.
func explainAs(t *testing.T, g *Global, from, ecs string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("zz.db.near.global.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	withECS(m, ecs)
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: from, TCP: true})
	g.ServeDNS(context.Background(), rec, m)
	return rec.Msg
}

// withECS gives m an OPT record, and in it an ECS option of prefix ecs when not "".
func withECS(m *dns.Msg, ecs string) {
	m.SetEdns0(4096, false)
	if ecs != "" {
		p := netip.MustParsePrefix(ecs)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1,
			SourceNetmask: uint8(p.Bits()), Address: net.IP(p.Addr().AsSlice())})
	}
}

// explain_from limits who may ask for explanations: others are refused, as with explain off. By
// default only the loopback may ask.
func TestExplainFrom(t *testing.T) {
	m := new(dns.Msg)
	m.SetQuestion("global.", dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	for _, tc := range []struct {
		from answer.Networks
		want map[string]int
	}{
		{defaults().ExplainFrom, map[string]int{"127.0.0.1": dns.RcodeSuccess, "::1": dns.RcodeSuccess, "10.1.0.1": dns.RcodeRefused, "fd00::1": dns.RcodeRefused}},
		{answer.Networks{netip.MustParsePrefix("10.0.0.0/8")}, map[string]int{"127.0.0.1": dns.RcodeRefused, "10.1.0.1": dns.RcodeSuccess}},
		{answer.Networks{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}, map[string]int{"10.1.0.1": dns.RcodeSuccess, "fd00::1": dns.RcodeSuccess}},
	} {
		g := zonedGlobal(t, contract.Sources{})
		g.ExplainFrom = tc.from
		for from, want := range tc.want {
			rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: from, TCP: true})
			g.ServeDNS(context.Background(), rec, m)
			if rec.Msg.Rcode != want || (want == dns.RcodeSuccess) != (len(rec.Msg.Answer) > 0) {
				t.Errorf("explain_from %v: CH TXT global. from %s: %s with %d records, want %s", tc.from, from, dns.RcodeToString[rec.Msg.Rcode], len(rec.Msg.Answer), dns.RcodeToString[want])
			}
		}
	}
}

// Zonal names, as CoreDNS's kubernetes plugin answers them, for every name form, in both schemes.
func TestZonalNames(t *testing.T) {
	g := zonedGlobal(t, contract.Sources{})
	for _, tc := range []struct {
		qname string
		qtype uint16
		rcode int
		want  []string
	}{
		{"za.pin._zone.zz.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.1", "10.0.0.2", "10.96.1.1"}},
		{"zb.pin._zone.zz.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.3"}},
		{"ZA.Pin._zone.zz.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.1", "10.0.0.2", "10.96.1.1"}},
		{"nowhere.pin._zone.zz.db.global.", dns.TypeA, dns.RcodeSuccess, nil},
		{"nowhere.prefer._zone.zz.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.96.2.1", "10.96.1.1", "10.96.3.1"}},
		{"zb.prefer._zone.zz.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.3"}},
		{"za.pin._zone.east.zz.db.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.1", "10.0.0.2"}},
		{"zb.pin._zone.zz-1.east.zz.db.global.", dns.TypeA, dns.RcodeSuccess, nil},
		{"zb.pin._zone._db._tcp.zz.db.global.", dns.TypeSRV, dns.RcodeSuccess, []string{"0 zz-2.east"}},
		{"za.pin._zone.zz.db.global.", dns.TypeSRV, dns.RcodeSuccess, []string{"0 zz-0.east", "0 zz-1.east", "2 zz-0.west"}},
		{"za.pin._zone.zz.db.near.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.1", "10.0.0.2"}},
		{"zc.pin._zone.zz.db.near.global.", dns.TypeA, dns.RcodeSuccess, []string{"10.96.2.1"}},
		{"za.pin._zone.zz.db.svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, []string{"10.0.0.1", "10.0.0.2", "10.96.1.1"}},
		{"za.pin._zone.zz.db.global.", dns.TypeTXT, dns.RcodeSuccess, nil},
		{"za.pin._zone.nope.db.global.", dns.TypeA, dns.RcodeNameError, nil},
		{"za.sometimes._zone.zz.db.global.", dns.TypeA, dns.RcodeNameError, nil},
		{"pin._zone.zz.db.global.", dns.TypeA, dns.RcodeNameError, nil},
		{"za.pin._zone.db.global.", dns.TypeA, dns.RcodeNameError, nil},
		{"za.pin._zone.global.", dns.TypeA, dns.RcodeNameError, nil},
	} {
		m := ask(t, g, "10.7.7.7", "", tc.qname, tc.qtype)
		got := answered(m)
		if tc.qtype == dns.TypeSRV {
			for i := range got {
				got[i] = strings.TrimSuffix(got[i], ".near")
			}
		}
		if m.Rcode != tc.rcode || !slices.Equal(got, tc.want) {
			t.Errorf("%s %s: %s %q, want %s %q", tc.qname, dns.TypeToString[tc.qtype], dns.RcodeToString[m.Rcode], got, dns.RcodeToString[tc.rcode], tc.want)
		}
		if len(m.Answer) == 0 && (len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA) {
			t.Errorf("%s: a negative answer without the SOA", tc.qname)
		}
	}
}
