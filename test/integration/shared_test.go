package integration

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
)

// sharedCorefile serves the plugin's names and the same names under alias. through rewrite, which
// renames the answers back, with loadbalance in front, which reorders them: replies whose address
// records the plugin's next answers share. No cache: it would answer most questions itself.
const sharedCorefile = `global:{{.Port}} alias:{{.Port}} {
    bind 127.0.0.1
    rewrite name suffix .alias. .global. answer auto
    loadbalance
    global global. {
        kubeconfig {{.Kubeconfig}}
        namespaces %s
        endpointslices off
        cluster east
    }
}
`

// TestSharedRecordsThroughOtherPlugins: the plugin answers a name with the address records its last
// answer of that name made (plugin/global/answer/addresses.go); CoreDNS's plugins that change a reply copy it
// first. So, asked at once over UDP and TCP by its own name, by the alias rewrite maps to it, in
// other case and by a name of one cluster, every reply of the real server holds the addresses it
// should, each with the name as asked as its owner (as the plugin was asked it).
func TestSharedRecordsThroughOtherPlugins(t *testing.T) {
	t.Parallel()
	ns, west := fooAndWest(t)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(sharedCorefile, ns))
	all := []string{"A 10.244.1.10", "A 10.244.2.11", "A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]}
	harness.Eventually(t, "foo's answer", func() error {
		return expectAnyOrder(t, c, "foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, all...)
	})
	names := map[string][]string{
		"foo." + ns + ".global.":      all,
		"foo." + ns + ".alias.":       all,
		"west.foo." + ns + ".global.": {"A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]},
		"west.foo." + ns + ".alias.":  {"A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]},
	}
	for _, want := range names {
		slices.Sort(want)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(names))
	for qname, want := range names {
		for _, proto := range []string{"udp", "tcp"} {
			wg.Go(func() {
				for i := range 200 {
					// The first label in other case each time: an owner of its own.
					asked := []byte(qname)
					for b := 0; asked[b] != '.'; b++ {
						if i>>b&1 == 1 {
							asked[b] -= 'a' - 'A'
						}
					}
					r, err := c.AskFrom(proto, "127.0.0.1", "", string(asked), dns.TypeA)
					if err != nil {
						errs <- err
						return
					}
					got := harness.Render(r.Answer)
					slices.Sort(got)
					if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
						errs <- fmt.Errorf("%s over %s: %s %q, want %q", asked, proto, dns.RcodeToString[r.Rcode], got, want)
						return
					}
					owner := string(asked)
					if strings.HasSuffix(qname, ".alias.") {
						owner = qname // rewrite asks the plugin the name lower-cased (request.Name)
					}
					for _, rr := range r.Answer {
						if h := rr.Header(); h.Name != owner || h.Ttl > 5 {
							errs <- fmt.Errorf("%s over %s: answered %s", asked, proto, rr)
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
