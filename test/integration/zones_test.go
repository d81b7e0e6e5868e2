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

// TestZonesFromServerBlock: without zone arguments the plugin serves its server block's zones, as
// CoreDNS's plugins do, and global. where the block is the root.
func TestZonesFromServerBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	west, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	all := []string{"A 10.244.1.10", "A 10.244.2.11", "A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]}
	// block is corefile with the server block's keys replaced, and opts added to the plugin's.
	block := func(keys, opts string) string {
		return fmt.Sprintf(strings.NewReplacer(
			"global:{{.Port}} {", keys+" {",
			"        rotate off\n", "        rotate off\n"+opts,
		).Replace(corefile), ns)
	}

	t.Run("mcs", func(t *testing.T) {
		c := harness.StartCoreDNS(t, cp, block("clusterset.local:{{.Port}}", "        names mcs\n"))
		eventuallyExpect(t, c, "foo."+ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, all...)
		testkit.Must(t, expect(t, c, "west.foo."+ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeNameError)) // MCS names, not .global's
		r := ask(t, c, "tcp", "clusterset.local.", dns.TypeSOA)
		if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeSOA || r.Answer[0].(*dns.SOA).Ns != "ns1.dns.clusterset.local." {
			t.Errorf("clusterset.local. SOA: %s %v", dns.RcodeToString[r.Rcode], r.Answer)
		}
		testkit.Must(t, expect(t, c, "foo."+ns+".global.", dns.TypeA, dns.RcodeRefused)) // no block serves global.
	})
	t.Run("root", func(t *testing.T) {
		c := harness.StartCoreDNS(t, cp, block(".:{{.Port}}", ""))
		eventuallyExpect(t, c, "foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, all...)
		testkit.Must(t, expect(t, c, "west.foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, all[2:]...))
	})
	t.Run("two zones", func(t *testing.T) {
		c := harness.StartCoreDNS(t, cp, block("a.example:{{.Port}} b.example:{{.Port}}", ""))
		eventuallyExpect(t, c, "foo."+ns+".a.example.", dns.TypeA, dns.RcodeSuccess, all...)
		testkit.Must(t, expect(t, c, "foo."+ns+".b.example.", dns.TypeA, dns.RcodeSuccess, all...))
		testkit.Must(t, expect(t, c, "foo."+ns+".global.", dns.TypeA, dns.RcodeRefused))
	})
}
