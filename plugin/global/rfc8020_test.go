package global

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	"github.com/miekg/dns"
)

// RFC 8020: nothing exists below a name that does not, and resolvers with aggressive NXDOMAIN
// (Unbound's harden-below-nxdomain) act on it. So every name the plugin answers has no NXDOMAIN
// parent, in every zone kind: the test finds every owner name among every form of every service,
// cluster, host and port of the snapshot (and the zones' own names), and asks each parent. A
// global service named dns, in two namespaces, makes dns.<zone> ambiguous above ns1.dns.<zone>.
// The one exception is the MCS specification's, which the README states.
func TestNoNXDOMAINAboveAName(t *testing.T) {
	src := source()
	for _, ns := range []string{"db", "app"} {
		src.Add(index.Key{Namespace: ns, Name: "dns"}, &index.Member{Namespace: ns, Name: "dns", Origin: index.Origin{Ports: dbPort}},
			indextest.Slice(dbPort, indextest.Endpoint("dns-0", "10.0.9.1")))
	}
	g := newGlobal(t, src, index.Key{Namespace: "db", Name: "dns"}, index.Key{Namespace: "app", Name: "dns"})
	g.Zones, g.MCSZones = []string{"global.", "clusterset.local."}, []string{"clusterset.local."}
	g.NSAddrs = []netip.Addr{netip.MustParseAddr("192.0.2.53")}

	// Every form of every name the snapshot could give, in either scheme: most do not answer.
	var forms []string
	snap := g.Index.Snapshot()
	for _, k := range snap.Keys() {
		svc := snap.Service(k)
		forms = append(forms, k.Name+"."+k.Namespace, k.Name, k.Name+"."+k.Namespace+".svc")
		for r := range svc.Records().All() {
			forms = append(forms, r.Cluster+"."+k.Name+"."+k.Namespace, r.Host+"."+r.Cluster+"."+k.Name+"."+k.Namespace,
				r.Host+"."+r.Cluster+"."+k.Name+"."+k.Namespace+".svc")
			for _, p := range r.Ports {
				srv := "_" + p.Name + "._" + strings.ToLower(p.Protocol) + "." + k.Name
				forms = append(forms, srv+"."+k.Namespace, srv, srv+"."+k.Namespace+".svc")
			}
		}
	}
	forms = append(forms, "ns1.dns", "dns-version") // the nameserver's name, and MCS's version

	owners := 0
	for _, zone := range g.Zones {
		for _, f := range forms {
			name := f + "." + zone
			answered := false
			for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT} {
				if m := query(t, g, name, qtype); m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
					answered = true
				}
			}
			if !answered {
				continue
			}
			owners++
			for parent := name; parent != zone; {
				_, parent, _ = strings.Cut(parent, ".")
				if l := strings.Split(strings.TrimSuffix(parent, "."+zone), "."); zone == "clusterset.local." && len(l) == 4 && l[3] == "svc" {
					continue // <clusterid>.<svc>.<ns>.svc must not exist: KEP-1645's choice (2.4.4), documented
				}
				if m := query(t, g, parent, dns.TypeA); m.Rcode == dns.RcodeNameError {
					t.Errorf("%s answers, but its parent %s is NXDOMAIN", name, parent)
				}
			}
		}
	}
	if owners < 20 {
		t.Errorf("only %d names answer: the walk found too little to check", owners)
	}
}

// A zonal name exists where its service's name does: a short name whose service has no ready
// record is the empty non-terminal of its namespace's services (NODATA), its zonal names are
// not, with or without that service (NXDOMAIN).
func TestZonalNameOfANamespace(t *testing.T) {
	src := source()
	db := index.Key{Namespace: "app", Name: "db"} // a service named as namespace db, none ready
	src.Add(db, &index.Member{Namespace: "app", Name: "db", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.NotReady(indextest.Endpoint("db-0", "10.0.8.1"))))
	for _, keys := range [][]index.Key{{db}, nil} {
		g := newGlobal(t, src, keys...)
		for qname, rcode := range map[string]int{"db.global.": dns.RcodeSuccess, "za.pin._zone.db.global.": dns.RcodeNameError,
			"za.prefer._zone.db.global.": dns.RcodeNameError} {
			if m := query(t, g, qname, dns.TypeA); m.Rcode != rcode || len(m.Answer) > 0 {
				t.Errorf("with services %v: %s: %s %v, want %s", keys, qname, dns.RcodeToString[m.Rcode], m.Answer, dns.RcodeToString[rcode])
			}
		}
	}
}
