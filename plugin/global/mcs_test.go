package global

import (
	"slices"
	"testing"

	"github.com/miekg/dns"
)

// The Kubernetes Multi-Cluster Services DNS specification's names (KEP-1645 specification.md,
// section 2.4, headless services), from the same index as .global.
func TestMCSNames(t *testing.T) {
	g := newGlobal(t, source())
	g.Zones, g.MCSZones = []string{"global.", "clusterset.local."}, []string{"clusterset.local."}
	const soa = "SOA clusterset.local. ns1.dns.clusterset.local."
	const fooNS = "foo.db.svc.clusterset.local."
	cases := []struct {
		qname  string
		qtype  uint16
		rcode  int
		answer []string
	}{
		{"dns-version.clusterset.local.", dns.TypeTXT, dns.RcodeSuccess, []string{`dns-version.clusterset.local. 5 IN TXT "1.0.0"`}},
		{fooNS, dns.TypeA, dns.RcodeSuccess, []string{
			fooNS + " 5 IN A 10.0.0.1", fooNS + " 5 IN A 10.0.0.2", fooNS + " 5 IN A 10.96.0.1", fooNS + " 5 IN A 10.96.1.1"}},
		{fooNS, dns.TypeAAAA, dns.RcodeSuccess, []string{fooNS + " 5 IN AAAA fd00::1"}},
		{"foo-0.west." + fooNS, dns.TypeA, dns.RcodeSuccess, []string{"foo-0.west." + fooNS + " 5 IN A 10.96.0.1"}},
		{"_db._tcp." + fooNS, dns.TypeSRV, dns.RcodeSuccess, []string{
			"_db._tcp." + fooNS + " 5 IN SRV 0 50 5432 foo-0.east." + fooNS,
			"_db._tcp." + fooNS + " 5 IN SRV 0 50 5432 foo-1.east." + fooNS,
			"_db._tcp." + fooNS + " 5 IN SRV 1 100 5432 foo-0.west." + fooNS,
			"_db._tcp." + fooNS + " 5 IN SRV 2 100 5432 foo-0.north." + fooNS}},
		{"_metrics._tcp." + fooNS, dns.TypeSRV, dns.RcodeSuccess, []string{"_metrics._tcp." + fooNS + " 5 IN SRV 1 100 9000 foo-0.west." + fooNS}},
		// Empty non-terminals: NODATA.
		{"db.svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"_tcp." + fooNS, dns.TypeSRV, dns.RcodeSuccess, nil},
		// Must not exist (2.4.4), no short forms, no .global forms, not ready, unknown.
		{"west." + fooNS, dns.TypeA, dns.RcodeNameError, nil},
		{"foo.clusterset.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"foo.db.clusterset.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"foo-2.east." + fooNS, dns.TypeA, dns.RcodeNameError, nil},
		{"empty.db.svc.clusterset.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"nope.svc.clusterset.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"_db._udp." + fooNS, dns.TypeSRV, dns.RcodeNameError, nil},
	}
	for _, tc := range cases {
		m := query(t, g, tc.qname, tc.qtype)
		if got := rrs(m.Answer); m.Rcode != tc.rcode || !slices.Equal(got, tc.answer) {
			t.Errorf("%s %s: %s %q, want %s %q", tc.qname, dns.TypeToString[tc.qtype], dns.RcodeToString[m.Rcode], got, dns.RcodeToString[tc.rcode], tc.answer)
		}
		if len(tc.answer) == 0 && (len(m.Ns) != 1 || rrs(m.Ns)[0] != soa) {
			t.Errorf("%s: negative answer without the SOA: %v", tc.qname, m.Ns)
		}
	}
	// The other zone of the same instance keeps .global's names.
	if m := query(t, g, "_db._tcp.foo.db.global.", dns.TypeSRV); len(m.Answer) != 4 || m.Answer[0].(*dns.SRV).Target != "foo-0.east.foo.db.global." {
		t.Errorf("the .global zone: %v", m.Answer)
	}
	if m := query(t, g, "dns-version.global.", dns.TypeTXT); m.Rcode != dns.RcodeNameError {
		t.Errorf("dns-version in the .global zone: %s", dns.RcodeToString[m.Rcode])
	}
}
