package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
)

// askCH sends qname TXT in class CH with a buffer of size (0: no EDNS).
func askCH(t *testing.T, c *harness.CoreDNS, proto, qname string, size uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(qname), dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	if size > 0 {
		m.SetEdns0(size, false)
	}
	return c.Exchange(t, m, proto)
}

// explanation is the CH TXT answer to qname over proto, one line per record, and its rcode.
func explanation(t *testing.T, c *harness.CoreDNS, proto, qname string) ([]string, int) {
	t.Helper()
	r := askCH(t, c, proto, qname, 4096)
	var lines []string
	for _, rr := range r.Answer {
		txt, ok := rr.(*dns.TXT)
		if !ok || txt.Hdr.Class != dns.ClassCHAOS {
			t.Fatalf("%s over %s: not a CH TXT record: %v", qname, proto, rr)
		}
		lines = append(lines, strings.Join(txt.Txt, ""))
	}
	return lines, r.Rcode
}

// explains checks that qname's explanation has rcode and, for each of want, a line containing it
// (the first of want in the first line), over UDP and TCP. Over UDP, an explanation more than 3
// times the query's size may come truncated, without records, as dig then asks over TCP.
func explains(t *testing.T, c *harness.CoreDNS, qname string, rcode int, want ...string) error {
	t.Helper()
	for _, proto := range []string{"udp", "tcp"} {
		if proto == "udp" {
			if r := askCH(t, c, proto, qname, 4096); r.Truncated {
				if err := noAmplification(qname, r); err != nil {
					return err
				}
				if r.Rcode != rcode {
					return fmt.Errorf("%s over udp: %s, want %s", qname, dns.RcodeToString[r.Rcode], dns.RcodeToString[rcode])
				}
				continue
			}
		}
		lines, got := explanation(t, c, proto, qname)
		if got != rcode {
			return fmt.Errorf("%s over %s: %s, want %s: %q", qname, proto, dns.RcodeToString[got], dns.RcodeToString[rcode], lines)
		}
		for i, w := range want {
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, w) }) || (i == 0 && !strings.Contains(lines[0], w)) {
				return fmt.Errorf("%s over %s: no line with %q in\n%s", qname, proto, w, strings.Join(lines, "\n"))
			}
		}
	}
	return nil
}

// noAmplification checks that r, an explanation of qname over UDP, is truncated without records
// and at most 3 times the size of its query (askCH's, with EDNS).
func noAmplification(qname string, r *dns.Msg) error {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(qname), dns.TypeTXT)
	q.SetEdns0(4096, false)
	if !r.Truncated || len(r.Answer)+len(r.Ns) > 0 || r.Len() > 3*q.Len() {
		return fmt.Errorf("%s over UDP: TC %v with %d records in %d bytes, want TC, none and at most %d bytes", qname, r.Truncated, len(r.Answer)+len(r.Ns), r.Len(), 3*q.Len())
	}
	return nil
}

// TestExplain: dig CH TXT explains every name form from the same state that answers IN, over UDP
// and TCP, and IN TXT stays NODATA.
func TestExplain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, west := fooAndWest(t)
	other := namespace(t)
	north, err := harness.CreateMirror(ctx, client(), mirror(ns, "north", true))
	testkit.Must(t, err)
	_, err = harness.CreateMirror(ctx, client(), mirrorOf(other, "foo", "west", true))
	testkit.Must(t, err)
	bar, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "bar", "west", true))
	testkit.Must(t, err)
	_, err = harness.SetGatewayIn(ctx, client(), ns, "north", false, nil)
	testkit.Must(t, err)

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns+" "+other))
	fooNS := "foo." + ns + ".global."
	eventuallyExpect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"], "A "+west.ClusterIPs["foo-1"])
	eventuallyExpect(t, c, "north."+fooNS, dns.TypeA, dns.RcodeNameError) // gateway down
	line := func(addr, host, cluster, tier, why, member, state string) string {
		return fmt.Sprintf("addr=%s host=%s cluster=%s tier=%s why=%s member=%s/%s state=%s", addr, host, cluster, tier, why, ns, member, state)
	}
	local0 := line("10.244.1.10", "foo-0", "east", "0", "local", "foo", "ready")
	local2 := line("10.244.1.12", "foo-2", "east", "0", "local", "foo", "not-ready")
	west1 := line(west.ClusterIPs["foo-1"], "foo-1", "west", "2", "region:us-east-1", "foo-west", "ready")
	northDown := line(north.ClusterIPs["foo-0"], "foo-0", "north", "3", "none", "foo-north", "gateway-down")

	harness.Eventually(t, "explanations", func() error {
		return explains(t, c, fooNS, dns.RcodeSuccess, "service="+ns+"/foo records=4 left-out=2 synced=true", local0, local2, west1, northDown)
	})
	for _, tc := range []struct {
		qname string
		rcode int
		want  []string
	}{
		{"west." + fooNS, dns.RcodeSuccess, []string{"service=" + ns + "/foo records=2 left-out=0", west1}},
		{"foo-2.east." + fooNS, dns.RcodeNameError, []string{"records=0 left-out=1", local2}},
		{"north." + fooNS, dns.RcodeNameError, []string{"records=0 left-out=1", northDown}},
		{"_db._tcp." + fooNS, dns.RcodeSuccess, []string{"records=4", local0 + " port=15432", west1 + " port=5432"}},
		{"_db._udp." + fooNS, dns.RcodeNameError, []string{"records=0", line("10.244.1.10", "foo-0", "east", "0", "local", "foo", "no-matching-port")}},
		{"nope." + ns + ".global.", dns.RcodeNameError, []string{"exists=false: no global service " + ns + "/nope"}},
		// A short name in one namespace.
		{"bar.global.", dns.RcodeSuccess, []string{"service=" + ns + "/bar records=1 left-out=0", line(bar.ClusterIPs["bar-0"], "bar-0", "west", "2", "region:us-east-1", "bar-west", "ready")}},
		{"a.b.c.d.e.global.", dns.RcodeNameError, []string{"exists=false: not a name of this zone"}},
		// The short name is in two namespaces: NXDOMAIN, and both explained.
		{"foo.global.", dns.RcodeNameError, []string{"name=foo ambiguous=true", "service=" + ns + "/foo records=4", "service=" + other + "/foo records=1"}},
		// The apex: this replica.
		{"global.", dns.RcodeSuccess, []string{"synced=true services=3 records=8", "cluster=east tier=0 why=local locality=region:us-east-1,zone:us-east-1a from=corefile services=1 ready=2 not-ready=1",
			"cluster=west tier=2 why=region:us-east-1 locality=region:us-east-1,zone:us-east-1b from=corefile services=3 ready=4",
			"cluster=north tier=3 why=none locality=region:eu-north-1,zone:eu-north-1a from=corefile services=1 ready=0 not-ready=0 terminating=0 gateway-down=1"}},
	} {
		testkit.Must(t, explains(t, c, tc.qname, tc.rcode, tc.want...))
		// IN has the same rcode; IN TXT never carries the explanation (MongoDB reads IN TXT).
		for _, proto := range []string{"udp", "tcp"} {
			if in := ask(t, c, proto, tc.qname, dns.TypeTXT); in.Rcode != tc.rcode || len(in.Answer) != 0 {
				t.Errorf("%s IN TXT over %s: %s %v", tc.qname, proto, dns.RcodeToString[in.Rcode], in.Answer)
			}
		}
	}

	// Over UDP a long explanation is no amplifier: truncated, without records, at most 3 times the
	// query; dig asks again over TCP (the checks above read it there).
	for _, size := range []uint16{512, 1232, 4096} {
		testkit.Must(t, noAmplification(fooNS, askCH(t, c, "udp", fooNS, size)))
	}

	// explain_from: only those sources may ask; others are refused, as with explain off.
	only := harness.StartCoreDNS(t, cp, strings.Replace(fmt.Sprintf(corefile, ns), "rotate off", "explain_from 127.0.0.2", 1))
	eventuallyExpect(t, only, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"], "A "+west.ClusterIPs["foo-1"])
	if lines, rcode := explanationFrom(t, only, "127.0.0.2", fooNS); rcode != dns.RcodeSuccess || len(lines) == 0 {
		t.Errorf("explain_from 127.0.0.2, from it: %s %q", dns.RcodeToString[rcode], lines)
	}
	if lines, rcode := explanationFrom(t, only, "127.0.0.1", fooNS); rcode != dns.RcodeRefused || len(lines) != 0 {
		t.Errorf("explain_from 127.0.0.2, from 127.0.0.1: %s %q", dns.RcodeToString[rcode], lines)
	}

	// explain off: CH is refused, as CoreDNS refuses it without a plugin that opens it.
	off := harness.StartCoreDNS(t, cp, strings.Replace(fmt.Sprintf(corefile, ns), "rotate off", "explain off", 1))
	eventuallyExpect(t, off, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"], "A "+west.ClusterIPs["foo-1"])
	for _, proto := range []string{"udp", "tcp"} {
		if r := askCH(t, off, proto, fooNS, 4096); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("explain off over %s: %s %v", proto, dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
}

// TestRotation: over many queries every address of the nearest tier comes first about equally
// often, and tier order holds in every answer. (TestBigAnswer truncates rotated answers.)
func TestRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	testkit.Must(t, harness.CreateNode(ctx, client(), harness.Node{Name: ns + "-a", Zone: "us-east-1a", Region: "us-east-1"}))
	sts := harness.StatefulSet{Namespace: ns, Service: "foo", Ports: dbPorts}
	var tier0 []string
	for i := range 3 {
		ip := fmt.Sprintf("10.244.5.%d", i+1)
		sts.Pods = append(sts.Pods, harness.Pod{Name: fmt.Sprintf("foo-%d", i), Node: ns + "-a", IP: ip, Ready: true})
		tier0 = append(tier0, "A "+ip)
	}
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), sts))
	west, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	north, err := harness.CreateMirror(ctx, client(), mirror(ns, "north", true))
	testkit.Must(t, err)
	tiers := [][]string{tier0, {"A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]}, {"A " + north.ClusterIPs["foo-0"]}}

	c := harness.StartCoreDNS(t, cp, strings.Replace(fmt.Sprintf(corefile, ns), "        rotate off\n", "", 1))
	fooNS := "foo." + ns + ".global."
	harness.Eventually(t, "all 6 records", func() error {
		if n := len(ask(t, c, "udp", fooNS, dns.TypeA).Answer); n != 6 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})
	const queries = 1000
	first := map[string]int{}
	for i := range queries {
		got := harness.Render(ask(t, c, []string{"udp", "tcp"}[i%2], fooNS, dns.TypeA).Answer)
		at := 0
		for _, tier := range tiers {
			if len(got) < at+len(tier) || !testkit.SameSet(got[at:at+len(tier)], tier) {
				t.Fatalf("query %d: tier order broken: %q", i, got)
			}
			at += len(tier)
		}
		first[got[0]]++
	}
	for _, a := range tier0 {
		if n := first[a]; n < queries/3*7/10 || n > queries/3*13/10 {
			t.Errorf("%s first in %d of %d answers: %v", a, n, queries, first)
		}
	}
	t.Logf("first address over %d queries: %v", queries, first)
}
