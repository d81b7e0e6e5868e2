package global

import (
	"context"
	"fmt"
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

// walkSource is source() with what makes policies and families disagree: db/foo also has a
// dual-stack pod in this cluster's tier with a second port, and db/mixed holds an IPv6-only member
// here and IPv4-only ones in west and north, so that the nearest tier differs by family.
func walkSource() *indextest.Source {
	src := source()
	two := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}, {Name: "metrics", Port: 9000, Protocol: "TCP"}}
	local := src.Members(foo)[0]
	src.SetSlices(local, append(src.Slices(local),
		indextest.Slice(two, indextest.Endpoint("foo-3", "10.0.0.4")),
		indextest.Slice(two, indextest.Endpoint("foo-3", "fd00::4")))...)
	mixed := index.Key{Namespace: "db", Name: "mixed"}
	src.Add(mixed, &index.Member{Namespace: "db", Name: "mixed", Origin: index.Origin{Ports: two}},
		indextest.Slice(two, indextest.Endpoint("mixed-0", "fd00::10")))
	src.Add(mixed, &index.Member{Namespace: "db", Name: "mixed-west", Origin: index.Origin{Cluster: "west", Ports: two}},
		indextest.Slice(two, indextest.Endpoint("mixed-0", "10.96.5.1"), indextest.Endpoint("mixed-1", "10.96.5.2")))
	src.Add(mixed, &index.Member{Namespace: "db", Name: "mixed-north", Origin: index.Origin{Cluster: "north", Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("mixed-0", "10.96.6.1")))
	return src
}

// explained is a record line of an explanation: its address, its SRV target and ports (SRV
// names list them), and whether the address answers and an SRV question answer it.
type explained struct {
	addr, target    string
	ports           []string
	inAddrs, inSRVs bool
}

// parseExplanation returns the record lines of an explanation, and the count its summary gives.
func parseExplanation(lines []string, domain string, srvName bool) (records []explained, count int) {
	for i, l := range lines {
		f := map[string]string{}
		for _, w := range strings.Fields(l) {
			if k, v, ok := strings.Cut(w, "="); ok {
				f[k] = v
			}
		}
		if i == 0 {
			fmt.Sscan(f["records"], &count)
		}
		if f["addr"] == "" {
			continue // the summary, a tier line
		}
		e := explained{addr: f["addr"], target: f["host"] + "." + f["cluster"] + "." + domain}
		if f["port"] != "" {
			e.ports = strings.Split(f["port"], ",")
		}
		e.inAddrs = f["state"] == "ready"
		e.inSRVs = e.inAddrs && f["srv"] != "left-out" || f["srv"] == "answered"
		records = append(records, e)
	}
	return records, count
}

// TestExplanationIsTheAnswer walks every name form, policy and question type over one fixture: the
// records dig CH TXT lists as answered are exactly the answer section (and the SRV answer's glue),
// and the summary counts them. Then again over a cluster spread over zones, for zonal names and
// answers ranked from clients on two nodes and from an unknown one.
func TestExplanationIsTheAnswer(t *testing.T) {
	g := newGlobal(t, walkSource(), index.Key{Namespace: "db", Name: "mixed"})
	g.Explain = true
	g.Zones = []string{"global.", "near.global.", "near2.global.", "near3.global."}
	g.Policies = answer.PoliciesOf(map[string]index.Policy{"near.global.": {Nearest: 1}, "near2.global.": {Nearest: 2}, "near3.global.": {Nearest: 3}})
	forms := []string{"foo.db", "foo", "east.foo.db", "west.foo.db", "foo-3.east.foo.db", "foo-0.west.foo.db",
		"_db._tcp.foo.db", "_metrics._tcp.foo.db", "_tcp.foo.db", "_db._tcp.foo", "_metrics._tcp.east.foo.db",
		"mixed.db", "west.mixed.db", "_db._tcp.mixed.db", "_metrics._tcp.mixed.db", "empty.db", "nope.db", "db",
		"z1.pin._zone.foo.db", "z2.prefer._zone.mixed.db"}
	checked := walk(t, g, forms, "10.240.0.1")

	g = zonedGlobal(t, contract.Sources{Node: true})
	g.Zones = []string{"global.", "near.global.", "near2.global."}
	g.Policies = answer.PoliciesOf(map[string]index.Policy{"near.global.": {Nearest: 1}, "near2.global.": {Nearest: 2}})
	forms = []string{"zz.db", "east.zz.db", "zz-1.east.zz.db", "_db._tcp.zz.db", "za.pin._zone.zz.db", "zb.pin._zone.zz.db",
		"nowhere.pin._zone.zz.db", "nowhere.prefer._zone.zz.db", "za.prefer._zone._db._tcp.zz.db", "zc.pin._zone.zz.db"}
	for _, from := range []string{"10.1.0.1", "10.1.0.3", "10.7.7.7"} {
		checked += walk(t, g, forms, from)
	}
	t.Logf("%d name, policy, question and client combinations", checked)
}

// walk checks every form in every zone of g, asked from address from, and returns how many
// questions it asked.
func walk(t *testing.T, g *Global, forms []string, from string) (checked int) {
	t.Helper()
	for _, zone := range g.Zones {
		for _, form := range forms {
			qname := form + "." + zone
			ch := askCH(t, g, from, qname)
			lines := txts(t, ch)
			svc, ns := "foo", "db"
			for _, s := range []string{"mixed", "zz"} {
				if strings.Contains(form, s+".db") {
					svc = s
				}
			}
			base := form
			if _, b, ok := strings.Cut(form, "._zone."); ok {
				base = b
			}
			srvName := strings.HasPrefix(base, "_")
			records, count := parseExplanation(lines, svc+"."+ns+"."+zone, srvName)
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeANY} {
				in := ask(t, g, from, "", qname, qtype)
				if in.Rcode != ch.Rcode {
					t.Errorf("%s %s from %s: IN %s, CH %s", qname, dns.TypeToString[qtype], from, dns.RcodeToString[in.Rcode], dns.RcodeToString[ch.Rcode])
				}
				got, want := answerSet(in, srvName), explainedSet(records, qtype, srvName)
				if !slices.Equal(got, want) {
					t.Errorf("%s %s from %s:\n answer      %q\n explanation %q\n%s", qname, dns.TypeToString[qtype], from, got, want, strings.Join(lines, "\n"))
				}
				checked++
			}
			answered := 0
			for _, e := range records {
				if e.inAddrs {
					answered++
				}
			}
			if len(lines) > 0 && strings.HasPrefix(lines[0], "service=") && count != answered {
				t.Errorf("%s: the summary counts %d records, the lines %d:\n%s", qname, count, answered, strings.Join(lines, "\n"))
			}
		}
	}
	return checked
}

// askCH asks g for the explanation of qname from address from.
func askCH(t *testing.T, g *Global, from, qname string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(qname, dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: from, TCP: true}) // all of it
	if _, err := g.ServeDNS(context.Background(), rec, m); err != nil || rec.Msg == nil {
		t.Fatalf("%s: %v %v", qname, err, rec.Msg)
	}
	return rec.Msg
}

// answerSet renders what an answer holds, sorted: addresses (the SRV answer's glue too), and an
// SRV record's target, with its port when ports is set.
func answerSet(m *dns.Msg, ports bool) []string {
	var out []string
	for _, rr := range append(slices.Clone(m.Answer), m.Extra...) {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		case *dns.SRV:
			if out = append(out, rr.Target); ports {
				out[len(out)-1] += fmt.Sprintf(" %d", rr.Port)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// explainedSet renders what the explanation says a question of qtype answers, as answerSet does.
// An SRV name answers SRV questions only.
func explainedSet(records []explained, qtype uint16, srvName bool) []string {
	var out []string
	for _, e := range records {
		v6 := strings.Contains(e.addr, ":")
		switch {
		case qtype == dns.TypeSRV && e.inSRVs && srvName:
			out = append(out, e.addr)
			for _, p := range e.ports {
				out = append(out, e.target+" "+p)
			}
		case qtype == dns.TypeSRV && e.inSRVs:
			out = append(out, e.addr, e.target)
		case qtype == dns.TypeSRV, srvName, !e.inAddrs:
		case qtype == dns.TypeANY, qtype == dns.TypeA && !v6, qtype == dns.TypeAAAA && v6:
			out = append(out, e.addr)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
