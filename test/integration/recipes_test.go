package integration

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRecipes checks, name for name, what docs/recipes.md tells etcd, CockroachDB, MongoDB,
// Kafka and Cassandra users to configure: over UDP and TCP, with miekg/dns for the exact answer
// and with Go's own resolver making the calls these programs make (net.LookupSRV, LookupTXT,
// LookupIPAddr).
func TestRecipes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	testkit.Must(t, harness.CreateNode(ctx, client(), harness.Node{Name: ns + "-a", Zone: "us-east-1a", Region: "us-east-1"}))
	// statefulSet makes this cluster's StatefulSet svc (pods svc-0, svc-1, ... ready or not, IPs
	// 10.244.<n>.<i+10>) and Linkerd's mirrors of it from west (same region: tier 2) and north
	// (tier 3), each with the given number of ready pods. Every Service port equals its
	// targetPort, as the recipes ask.
	type objects struct {
		local  []string // pod IPs
		mirror map[string]*harness.MirrorObjects
	}
	statefulSet := func(svc string, n int, ports []harness.Port, ready []bool, remote map[string]int) objects {
		t.Helper()
		o := objects{mirror: map[string]*harness.MirrorObjects{}}
		s := harness.StatefulSet{Namespace: ns, Service: svc, Ports: ports}
		for i, r := range ready {
			ip := fmt.Sprintf("10.244.%d.%d", n, i+10)
			s.Pods = append(s.Pods, harness.Pod{Name: fmt.Sprintf("%s-%d", svc, i), Node: ns + "-a", IP: ip, Ready: r})
			o.local = append(o.local, ip)
		}
		testkit.Must(t, harness.CreateStatefulSet(ctx, client(), s))
		for cluster, pods := range remote {
			m := harness.Mirror{Namespace: ns, Service: svc, Cluster: cluster, Ports: ports, Labels: map[string]string{"app": svc}}
			for i := range pods {
				m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("%s-%d", svc, i), Ready: true})
			}
			objs, err := harness.CreateMirror(ctx, client(), m)
			testkit.Must(t, err)
			o.mirror[cluster] = objs
		}
		return o
	}
	all := []bool{true, true}
	etcd := statefulSet("etcd", 1, []harness.Port{{Name: "etcd-server-ssl", Port: 2380}, {Name: "etcd-client-ssl", Port: 2379}},
		[]bool{true, false}, map[string]int{"west": 2, "north": 1})
	crdb := statefulSet("crdb", 2, []harness.Port{{Name: "grpc", Port: 26257}, {Name: "http", Port: 8080}}, all, map[string]int{"west": 1})
	mongo := statefulSet("mongo", 3, []harness.Port{{Name: "mongodb", Port: 27017}}, all, map[string]int{"west": 1})
	kafka := statefulSet("kafka", 4, []harness.Port{{Name: "broker", Port: 9092}}, all, map[string]int{"west": 1})

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns))
	zone := ns + ".global."
	eventuallyExpect(t, c, "kafka."+zone, dns.TypeA, dns.RcodeSuccess, "A "+kafka.local[0], "A "+kafka.local[1], "A "+kafka.mirror["west"].ClusterIPs["kafka-0"])

	// srv is one expected SRV record: priority = tier, equal weights within a tier.
	srv := func(prio, weight, port int, host, cluster, svc string) string {
		return fmt.Sprintf("SRV %d %d %d %s.%s.%s.%s", prio, weight, port, host, cluster, svc, zone)
	}

	t.Run("etcd discovery-srv", func(t *testing.T) {
		// etcd --discovery-srv etcd.<ns>.global asks for _etcd-server-ssl._tcp.<domain> (https peers)
		// and _etcd-server._tcp.<domain> (http peers), and needs one of the two
		// (server/embed/config.go GetDNSClusterNames, client/pkg/srv/srv.go GetCluster).
		qname := "_etcd-server-ssl._tcp.etcd." + zone
		west := etcd.mirror["west"].ClusterIPs
		peers := map[string]string{
			"etcd-0.east.etcd." + zone:  etcd.local[0],
			"etcd-0.west.etcd." + zone:  west["etcd-0"],
			"etcd-1.west.etcd." + zone:  west["etcd-1"],
			"etcd-0.north.etcd." + zone: etcd.mirror["north"].ClusterIPs["etcd-0"],
		}
		// etcd-1 is not ready, as an etcd member is until the cluster has formed: without
		// publishNotReadyAddresses it is not a peer.
		withoutNotReady := []string{
			srv(0, 100, 2380, "etcd-0", "east", "etcd"),
			srv(2, 50, 2380, "etcd-0", "west", "etcd"), srv(2, 50, 2380, "etcd-1", "west", "etcd"),
			srv(3, 100, 2380, "etcd-0", "north", "etcd"),
		}
		eventuallyExpect(t, c, qname, dns.TypeSRV, dns.RcodeSuccess, withoutNotReady...)
		testkit.Must(t, expect(t, c, "etcd-1.east.etcd."+zone, dns.TypeA, dns.RcodeNameError))

		// With it, the EndpointSlice controller marks every endpoint ready (k8s.io/endpointslice
		// utils.go: ready = publishNotReadyAddresses || ...), so etcd-1 is a peer at once.
		publishNotReadyAddresses(t, ns, "etcd")
		peers["etcd-1.east.etcd."+zone] = etcd.local[1]
		every := slices.Concat([]string{srv(0, 50, 2380, "etcd-0", "east", "etcd"), srv(0, 50, 2380, "etcd-1", "east", "etcd")}, withoutNotReady[1:])
		eventuallyExpect(t, c, qname, dns.TypeSRV, dns.RcodeSuccess, every...)
		testkit.Must(t, expect(t, c, "etcd-1.east.etcd."+zone, dns.TypeA, dns.RcodeSuccess, "A "+etcd.local[1]))
		checkGlue(t, c, qname, peers)
		// The http variant does not exist (no port of that name): NXDOMAIN, which etcd tolerates
		// when the https one answers.
		testkit.Must(t, expect(t, c, "_etcd-server._tcp.etcd."+zone, dns.TypeSRV, dns.RcodeNameError))
		// etcdctl --discovery-srv asks for _etcd-client-ssl._tcp.<domain>.
		testkit.Must(t, expect(t, c, "_etcd-client-ssl._tcp.etcd."+zone, dns.TypeSRV, dns.RcodeSuccess,
			srv(0, 50, 2379, "etcd-0", "east", "etcd"), srv(0, 50, 2379, "etcd-1", "east", "etcd"),
			srv(2, 50, 2379, "etcd-0", "west", "etcd"), srv(2, 50, 2379, "etcd-1", "west", "etcd"),
			srv(3, 100, 2379, "etcd-0", "north", "etcd")))

		// What etcd computes, with Go's resolver as etcd calls it: lookupSRV(service, "tcp",
		// domain), then ResolveTCPAddr of each target. A member finds itself by comparing its
		// --initial-advertise-peer-urls, resolved, with each target: etcd-0 advertises
		// https://etcd-0.east.etcd.<ns>.global:2380.
		for _, proto := range []string{"udp", "tcp"} {
			r := goResolver(c, proto)
			_, addrs, err := r.LookupSRV(ctx, "etcd-server-ssl", "tcp", "etcd."+zone)
			testkit.Must(t, err)
			var cluster []string
			last := -1
			for _, a := range addrs {
				if int(a.Priority) < last {
					t.Errorf("%s: net.LookupSRV returned priority %d after %d", proto, a.Priority, last)
				}
				last = int(a.Priority)
				ips, err := r.LookupIPAddr(ctx, a.Target)
				testkit.Must(t, err)
				if len(ips) != 1 || ips[0].IP.String() != peers[a.Target] || a.Port != 2380 {
					t.Errorf("%s: %s:%d resolves to %v, want %s:2380", proto, a.Target, a.Port, ips, peers[a.Target])
				}
				cluster = append(cluster, "https://"+net.JoinHostPort(strings.TrimSuffix(a.Target, "."), fmt.Sprint(a.Port)))
			}
			if len(cluster) != len(peers) {
				t.Errorf("%s: %d peers %v, want %d", proto, len(cluster), cluster, len(peers))
			}
			t.Logf("%s: etcd's initial cluster from SRV: %s", proto, strings.Join(cluster, ","))
		}
	})

	t.Run("cockroachdb join", func(t *testing.T) {
		west := crdb.mirror["west"].ClusterIPs["crdb-0"]
		// --join crdb.<ns>.global: every peer; the dialer takes one.
		eventuallyExpect(t, c, "crdb."+zone, dns.TypeA, dns.RcodeSuccess, "A "+crdb.local[0], "A "+crdb.local[1], "A "+west)
		// --join with per-pod names: one address each, the pod IP here, the per-pod mirror in
		// the other clusters.
		testkit.Must(t, expect(t, c, "crdb-0.east.crdb."+zone, dns.TypeA, dns.RcodeSuccess, "A "+crdb.local[0]))
		testkit.Must(t, expect(t, c, "crdb-1.east.crdb."+zone, dns.TypeA, dns.RcodeSuccess, "A "+crdb.local[1]))
		testkit.Must(t, expect(t, c, "crdb-0.west.crdb."+zone, dns.TypeA, dns.RcodeSuccess, "A "+west))
		// --join crdb.<ns>.global: every peer; the dialer takes one.
		// --experimental-dns-srv --join _grpc._tcp.crdb.<ns>.global: CockroachDB looks the name up
		// as given (pkg/util/netutil/srv.go: lookupSRV("", "", name)).
		qname := "_grpc._tcp.crdb." + zone
		testkit.Must(t, expect(t, c, qname, dns.TypeSRV, dns.RcodeSuccess,
			srv(0, 50, 26257, "crdb-0", "east", "crdb"), srv(0, 50, 26257, "crdb-1", "east", "crdb"),
			srv(2, 100, 26257, "crdb-0", "west", "crdb")))
		for _, proto := range []string{"udp", "tcp"} {
			_, addrs, err := goResolver(c, proto).LookupSRV(ctx, "", "", qname)
			testkit.Must(t, err)
			if len(addrs) != 3 || addrs[2].Target != "crdb-0.west.crdb."+zone {
				t.Errorf("%s: net.LookupSRV(\"\", \"\", %s) = %v", proto, qname, srvTargets(addrs))
			}
		}
	})

	t.Run("mongodb+srv", func(t *testing.T) {
		west := mongo.mirror["west"].ClusterIPs["mongo-0"]
		// mongodb+srv://mongo.<ns>.global/: SRV _mongodb._tcp.<host> and TXT <host>, class IN.
		qname := "_mongodb._tcp.mongo." + zone
		eventuallyExpect(t, c, qname, dns.TypeSRV, dns.RcodeSuccess,
			srv(0, 50, 27017, "mongo-0", "east", "mongo"), srv(0, 50, 27017, "mongo-1", "east", "mongo"),
			srv(2, 100, 27017, "mongo-0", "west", "mongo"))
		checkGlue(t, c, qname, map[string]string{
			"mongo-0.east.mongo." + zone: mongo.local[0], "mongo-1.east.mongo." + zone: mongo.local[1], "mongo-0.west.mongo." + zone: west,
		})
		// No TXT record: NODATA with the SOA, which drivers take as "no default options".
		testkit.Must(t, expect(t, c, "mongo."+zone, dns.TypeTXT, dns.RcodeSuccess))
		for _, proto := range []string{"udp", "tcp"} {
			r := goResolver(c, proto)
			_, addrs, err := r.LookupSRV(ctx, "mongodb", "tcp", "mongo."+zone)
			testkit.Must(t, err)
			// The seedlist spec: every target must end with the host's {domainname}, here
			// <ns>.global (the host minus its first label).
			for _, a := range addrs {
				if !strings.HasSuffix(a.Target, "."+zone) {
					t.Errorf("%s: SRV target %s is outside %s", proto, a.Target, zone)
				}
			}
			if len(addrs) != 3 {
				t.Errorf("%s: %d SRV records, want 3", proto, len(addrs))
			}
			txt, err := r.LookupTXT(ctx, "mongo."+zone)
			if len(txt) != 0 || !isNotFound(err) {
				t.Errorf("%s: TXT %q, %v; want none, not found", proto, txt, err)
			}
		}
		// The short name answers SRV too, but its targets do not end with mongo.global, as the
		// spec requires of a two-label host: drivers refuse it.
		testkit.Must(t, expect(t, c, "_mongodb._tcp.mongo.global.", dns.TypeSRV, dns.RcodeSuccess,
			srv(0, 50, 27017, "mongo-0", "east", "mongo"), srv(0, 50, 27017, "mongo-1", "east", "mongo"),
			srv(2, 100, 27017, "mongo-0", "west", "mongo")))
	})

	t.Run("kafka and cassandra advertised names", func(t *testing.T) {
		west := kafka.mirror["west"].ClusterIPs["kafka-0"]
		// Each broker advertises its per-pod name; one name, one address in each cluster: the
		// pod IP at home, the per-pod mirror's ClusterIP elsewhere.
		testkit.Must(t, expect(t, c, "kafka-0.east.kafka."+zone, dns.TypeA, dns.RcodeSuccess, "A "+kafka.local[0]))
		testkit.Must(t, expect(t, c, "kafka-0.west.kafka."+zone, dns.TypeA, dns.RcodeSuccess, "A "+west))
		testkit.Must(t, expect(t, c, "kafka-0.west.kafka."+zone, dns.TypeAAAA, dns.RcodeSuccess))
		// port == targetPort: the advertised port is right in every cluster, which SRV shows:
		// the local pod's port and the mirror Service's port agree.
		testkit.Must(t, expect(t, c, "_broker._tcp.kafka."+zone, dns.TypeSRV, dns.RcodeSuccess,
			srv(0, 50, 9092, "kafka-0", "east", "kafka"), srv(0, 50, 9092, "kafka-1", "east", "kafka"),
			srv(2, 100, 9092, "kafka-0", "west", "kafka")))
		testkit.Must(t, expect(t, c, "kafka-9.east.kafka."+zone, dns.TypeA, dns.RcodeNameError))
	})
}

// publishNotReadyAddresses sets spec.publishNotReadyAddresses on Service svc.
func publishNotReadyAddresses(t *testing.T, ns, svc string) {
	t.Helper()
	patch := []byte(`{"spec":{"publishNotReadyAddresses":true}}`)
	_, err := client().CoreV1().Services(ns).Patch(context.Background(), svc, "application/merge-patch+json", patch, metav1.PatchOptions{})
	testkit.Must(t, err)
}

// checkGlue checks, over UDP and TCP, that the SRV answer to qname carries one A record per target,
// with the target's address.
func checkGlue(t *testing.T, c *harness.CoreDNS, qname string, want map[string]string) {
	t.Helper()
	for _, proto := range []string{"udp", "tcp"} {
		r := ask(t, c, proto, qname, dns.TypeSRV)
		glue := map[string]string{}
		for _, rr := range r.Extra {
			if a, ok := rr.(*dns.A); ok {
				glue[a.Hdr.Name] = a.A.String()
			}
		}
		for _, rr := range r.Answer {
			target := rr.(*dns.SRV).Target
			if glue[target] != want[target] {
				t.Errorf("%s %s: glue for %s is %q, want %q", proto, qname, target, glue[target], want[target])
			}
		}
		if len(glue) != len(want) || len(r.Answer) != len(want) {
			t.Errorf("%s %s: %d records, %d glue, want %d", proto, qname, len(r.Answer), len(glue), len(want))
		}
	}
}

// goResolver is Go's own resolver (what etcd, CockroachDB and the MongoDB Go driver use), sending
// every query to c over proto.
func goResolver(c *harness.CoreDNS, proto string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if proto == "tcp" {
			network = "tcp" // a stream conn makes the resolver frame queries for TCP
		}
		d := net.Dialer{Timeout: 2 * time.Second}
		return d.DialContext(ctx, network, c.Addr)
	}}
}

func srvTargets(addrs []*net.SRV) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, fmt.Sprintf("%d %s:%d", a.Priority, a.Target, a.Port))
	}
	return out
}

func isNotFound(err error) bool {
	de, ok := err.(*net.DNSError)
	return ok && de.IsNotFound
}
