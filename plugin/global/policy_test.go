package global

import (
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/coredns/caddy"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// addresses renders the A, AAAA or SRV records of an answer, in order: "10.0.0.1", "0 db foo-0.east".
func addresses(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		case *dns.SRV:
			out = append(out, rr.Target)
		}
	}
	return out
}

// Under `nearest N`, a zone answers the nearest whole tiers until N records of the type asked are
// in; every name form works there; rcodes are those of the zone without a policy. The zone's
// policy wins over the owner's annotation, which wins over the instance's default.
func TestPolicies(t *testing.T) {
	src := source()
	g := newGlobal(t, src)
	g.Zones = []string{"global.", "near.global.", "near2.global."}
	g.Policies = answer.PoliciesOf(map[string]index.Policy{"near.global.": {Nearest: 1}, "near2.global.": {Nearest: 3}})
	ask := func(qname string, qtype uint16, rcode int, want ...string) {
		t.Helper()
		m := query(t, g, qname, qtype)
		if got := addresses(m); m.Rcode != rcode || !slices.Equal(got, want) {
			t.Errorf("%s %s: %s %q, want %s %q", qname, dns.TypeToString[qtype], dns.RcodeToString[m.Rcode], got, dns.RcodeToString[rcode], want)
		}
	}
	failovers := func() float64 { return testutil.ToFloat64(telemetry.FailoverAnswers) }
	before := failovers()

	ask("foo.db.global.", dns.TypeA, dns.RcodeSuccess, "10.0.0.1", "10.0.0.2", "10.96.0.1", "10.96.1.1")
	ask("foo.db.near.global.", dns.TypeA, dns.RcodeSuccess, "10.0.0.1", "10.0.0.2")
	ask("foo.near.global.", dns.TypeA, dns.RcodeSuccess, "10.0.0.1", "10.0.0.2")
	ask("foo.db.near2.global.", dns.TypeA, dns.RcodeSuccess, "10.0.0.1", "10.0.0.2", "10.96.0.1")
	ask("_db._tcp.foo.db.near.global.", dns.TypeSRV, dns.RcodeSuccess, "foo-0.east.foo.db.near.global.", "foo-1.east.foo.db.near.global.")
	ask("_metrics._tcp.foo.db.near.global.", dns.TypeSRV, dns.RcodeSuccess, "foo-0.west.foo.db.near.global.") // only west has the port
	ask("north.foo.db.near.global.", dns.TypeA, dns.RcodeSuccess, "10.96.1.1")
	ask("foo-0.north.foo.db.near.global.", dns.TypeA, dns.RcodeSuccess, "10.96.1.1")
	ask("empty.db.near.global.", dns.TypeA, dns.RcodeNameError)
	ask("north.foo.db.near.global.", dns.TypeAAAA, dns.RcodeSuccess)
	if n := failovers() - before; n != 0 {
		t.Errorf("%v failovers counted with the nearest tier answering", n)
	}
	// This cluster has no AAAA record: the nearest tier with one answers, and that is no failover
	// (nor is a port only west has): this cluster's tier has ready records.
	ask("foo.db.near.global.", dns.TypeAAAA, dns.RcodeSuccess, "fd00::1")
	if n := failovers() - before; n != 0 {
		t.Errorf("%v failovers counted for a type or port the nearest tier lacks", n)
	}

	// This cluster's pods go: the next tier answers at once, and each answer counts.
	local := src.Members(foo)[0]
	src.SetSlices(local, indextest.Slice(dbPort, indextest.NotReady(indextest.Endpoint("foo-0", "10.0.0.1"))))
	g.Index.Changed(foo)
	g.Index.Publish()
	ask("foo.db.near.global.", dns.TypeA, dns.RcodeSuccess, "10.96.0.1")
	ask("_db._tcp.foo.db.near.global.", dns.TypeSRV, dns.RcodeSuccess, "foo-0.west.foo.db.near.global.")
	ask("foo.db.near2.global.", dns.TypeA, dns.RcodeSuccess, "10.96.0.1", "10.96.1.1")
	ask("foo.db.global.", dns.TypeA, dns.RcodeSuccess, "10.96.0.1", "10.96.1.1") // all: no failover
	if n := failovers() - before; n != 3 {
		t.Errorf("%v failovers counted, want 3", n)
	}
	// dig CH TXT says the policy, who set it, the tiers answered and why the others are not.
	g.Explain = true
	want := []string{
		"service=db/foo records=2 left-out=2 synced=true serial=_ age=_ policy=nearest from=zone",
		"tier=0 clusters=east ready=0 answered=false why=no-ready-record",
		"tier=1 clusters=west ready=2 answered=true",
		"tier=2 clusters=north ready=1 answered=false why=nearer-tiers-hold-1",
		"addr=10.96.0.1 host=foo-0 cluster=west tier=1 why=zone:z1 member=db/foo-west state=ready",
		"addr=10.96.1.1 host=foo-0 cluster=north tier=2 why=region:r1 member=db/foo-north state=beyond-nearest",
		"addr=fd00::1 host=foo-0 cluster=west tier=1 why=zone:z1 member=db/foo-west state=ready",
		"addr=10.0.0.1 host=foo-0 cluster=east tier=0 why=local member=db/foo state=not-ready",
	}
	if got := txts(t, chaos(t, g, "foo.db.near.global.", dns.ClassCHAOS)); !slices.Equal(got, want) {
		t.Errorf("explanation:\n got %q\nwant %q", got, want)
	}
	g.Explain = false

	// The owner's policy answers where no zone has one; a zone's wins over it.
	pol := index.Policy{Nearest: 1}
	src.Remove(foo, local)
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: dbPort}, Settings: &index.Settings{Policy: &pol}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.0.0.1"), indextest.Endpoint("foo-1", "10.0.0.2")))
	g.Index.Changed(foo)
	g.Index.Publish()
	ask("foo.db.global.", dns.TypeA, dns.RcodeSuccess, "10.0.0.1", "10.0.0.2")
	ask("foo.db.near2.global.", dns.TypeA, dns.RcodeSuccess, "10.0.0.1", "10.0.0.2", "10.96.0.1")
	// Who set each, as the explanation says (from=).
	from := func(qname string) string {
		t.Helper()
		for _, kv := range strings.Fields(txts(t, chaos(t, g, qname, dns.ClassCHAOS))[0]) {
			if v, ok := strings.CutPrefix(kv, "from="); ok {
				return v
			}
		}
		return ""
	}
	g.Explain = true
	for qname, want := range map[string]string{"foo.db.global.": "annotation", "foo.db.near.global.": "zone", "empty.db.global.": "default"} {
		if got := from(qname); got != want {
			t.Errorf("policy of %s from %q, want %s", qname, got, want)
		}
	}
	g.Policies.Set("", index.Policy{Nearest: 2})
	if got := txts(t, chaos(t, g, "empty.db.global.", dns.ClassCHAOS))[0]; !strings.Contains(got, " policy=nearest-2 from=default") {
		t.Errorf("without an annotation: %s, want the default nearest 2", got)
	}
}

func TestParsePolicies(t *testing.T) {
	g, err := parseGlobal(caddy.NewTestController("dns", `global global near.global near3.global {
		policy nearest near.global
		policy nearest 3 near3.global
		policy all
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]index.Policy{"near.global.": {Nearest: 1}, "near3.global.": {Nearest: 3}, "": {}}
	if len(g.Policies) != len(want) {
		t.Fatalf("policies %v, want %v", g.Policies, want)
	}
	for z, p := range want {
		if got, _ := g.Policies.Get(z); got != p {
			t.Errorf("policy of %q: %v, want %v", z, got, p)
		}
	}
	for _, bad := range []string{
		"global {\n policy\n}",
		"global {\n policy closest\n}",
		"global {\n policy nearest 0\n}",
		"global {\n policy nearest elsewhere.global\n}",
		"global near.global {\n policy nearest near.global\n policy all near.global\n}",
		"global {\n policy all\n policy nearest\n}",
	} {
		if _, err := parseGlobal(caddy.NewTestController("dns", bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Every answer with records is counted by the tier of its nearest record; NXDOMAIN and NODATA are not.
func TestAnswersByTier(t *testing.T) {
	g := newGlobal(t, source())
	count := func() (c [4]float64) {
		for i := range c {
			c[i] = testutil.ToFloat64(telemetry.Answers.WithLabelValues(string(rune('0' + i))))
		}
		return c
	}
	before := count()
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"foo.db.global.", dns.TypeA},                      // east: 0
		{"foo.db.global.", dns.TypeANY},                    // east: 0
		{"foo.db.global.", dns.TypeAAAA},                   // only west (same zone) has one: 1
		{"_metrics._tcp.foo.db.global.", dns.TypeSRV},      // only west has the port: 1
		{"north.foo.db.global.", dns.TypeA},                // same region: 2
		{"north.foo.db.global.", dns.TypeAAAA},             // NODATA
		{"empty.db.global.", dns.TypeA},                    // NXDOMAIN
		{"_db._tcp.foo-0.north.foo.db.global.", dns.TypeA}, // NXDOMAIN
	} {
		query(t, g, q.name, q.qtype)
	}
	after := count()
	for i, want := range []float64{2, 2, 1, 0} {
		if got := after[i] - before[i]; got != want {
			t.Errorf("tier %d: %v answers, want %v", i, got, want)
		}
	}
}
