package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
)

// mcsCorefile is corefile answering the Multi-Cluster Services DNS specification's names under
// clusterset.local and .global's under global, from one instance.
var mcsCorefile = strings.NewReplacer(
	"global:{{.Port}} {", "clusterset.local:{{.Port}} global:{{.Port}} {",
	"    global {", "    global clusterset.local global {",
	"        rotate off\n", "        rotate off\n        names mcs clusterset.local\n",
).Replace(corefile)

// TestMCSNames: every name form of KEP-1645's DNS specification for headless services (section
// 2.4), over UDP and TCP, including those that must not exist.
func TestMCSNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	west, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(mcsCorefile, ns))
	zone := "clusterset.local."
	fooNS := "foo." + ns + ".svc." + zone
	all := []string{"A 10.244.1.10", "A 10.244.2.11", "A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]}
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, all...)
	target := func(host, cluster string) string { return host + "." + cluster + "." + fooNS }
	srv := []string{
		"SRV 0 50 15432 " + target("foo-0", "east"), "SRV 0 50 15432 " + target("foo-1", "east"),
		"SRV 2 50 5432 " + target("foo-0", "west"), "SRV 2 50 5432 " + target("foo-1", "west"),
	}
	for _, tc := range []struct {
		qname  string
		qtype  uint16
		rcode  int
		answer []string
	}{
		{"dns-version." + zone, dns.TypeTXT, dns.RcodeSuccess, []string{`TXT "1.0.0"`}},
		{fooNS, dns.TypeAAAA, dns.RcodeSuccess, nil},
		{target("foo-1", "west"), dns.TypeA, dns.RcodeSuccess, []string{"A " + west.ClusterIPs["foo-1"]}},
		{target("foo-0", "east"), dns.TypeA, dns.RcodeSuccess, []string{"A 10.244.1.10"}},
		{"_db._tcp." + fooNS, dns.TypeSRV, dns.RcodeSuccess, srv},
		{fooNS, dns.TypeSRV, dns.RcodeSuccess, srv},
		{ns + ".svc." + zone, dns.TypeA, dns.RcodeSuccess, nil}, // empty non-terminals
		{"svc." + zone, dns.TypeA, dns.RcodeSuccess, nil},
		{"_tcp." + fooNS, dns.TypeSRV, dns.RcodeSuccess, nil},
		// 2.4.4: no record for one cluster's backends; no short or .global-style forms here.
		{"west." + fooNS, dns.TypeA, dns.RcodeNameError, nil},
		{"east." + fooNS, dns.TypeA, dns.RcodeNameError, nil},
		{"foo." + zone, dns.TypeA, dns.RcodeNameError, nil},
		{"foo." + ns + "." + zone, dns.TypeA, dns.RcodeNameError, nil},
		{target("foo-2", "east"), dns.TypeA, dns.RcodeNameError, nil}, // not ready
		{"_db._udp." + fooNS, dns.TypeSRV, dns.RcodeNameError, nil},
		{"nope." + ns + ".svc." + zone, dns.TypeA, dns.RcodeNameError, nil},
		// The same instance's .global zone keeps its names.
		{"west.foo." + ns + ".global.", dns.TypeA, dns.RcodeSuccess, []string{"A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]}},
	} {
		testkit.Must(t, expect(t, c, tc.qname, tc.qtype, tc.rcode, tc.answer...))
	}
	// Glue for the SRV targets, in the MCS form.
	r := ask(t, c, "tcp", "_db._tcp."+fooNS, dns.TypeSRV)
	if len(r.Extra) < 4 || r.Extra[0].Header().Name != target("foo-0", "east") {
		t.Errorf("SRV glue: %v", r.Extra)
	}
}
