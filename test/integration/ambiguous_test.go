package integration

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
)

// TestAmbiguousShortNameClients measures what real clients make of the answer to an ambiguous
// short name (bar.global, with bar in two namespaces): the plugin's NXDOMAIN with an Extended DNS
// Error and the zone's SOA, against REFUSED with the same EDE (what it answered before this
// measurement). The REFUSED variant is bin/coredns's own reply with its rcode rewritten by a proxy.
//
// The clients ask, as in a pod, the cluster DNS: a bin/coredns that forwards global to the plugin
// and answers cluster.local with NXDOMAIN, on port 53 of a loopback address. glibc
// (getent ahosts, and getaddrinfo through Go's cgo resolver) and Go's resolver read
// /etc/resolv.conf, so each runs in a mount namespace of its own (unshare -m) where a test
// resolv.conf is bind-mounted over it: root only. The CoreDNS forward facts are asserted; the
// clients' behaviour is logged as a table (it belongs to their versions, not to us), and only
// "no client gets an address" is asserted.
func TestAmbiguousShortNameClients(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount namespace for /etc/resolv.conf and port 53")
	}
	if err := exec.Command("unshare", "-m", "true").Run(); err != nil {
		t.Skipf("no mount namespaces: %v", err)
	}
	ctx := context.Background()
	ns1, ns2 := namespace(t), namespace(t)
	for _, ns := range []string{ns1, ns2} {
		_, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "bar", "west", true))
		testkit.Must(t, err)
	}
	g := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns1+" "+ns2))
	harness.Eventually(t, "bar.global ambiguous", func() error {
		if r := ask(t, g, "tcp", "bar.global.", dns.TypeA); r.Rcode != dns.RcodeNameError || extendedError(r) == nil {
			return fmt.Errorf("%s, EDE %v", dns.RcodeToString[r.Rcode], extendedError(r))
		}
		return nil
	})
	refused := startDNSProxy(t, g.Addr, true)
	nxdomain := startDNSProxy(t, g.Addr, false)
	ips := loopbackIPs(t, 4)
	fwd := map[int][2]*harness.CoreDNS{ // the cluster DNS (two, for two nameservers) per rcode
		dns.RcodeRefused:   {startClusterDNS(t, ips[0], refused.Addr), startClusterDNS(t, ips[1], refused.Addr)},
		dns.RcodeNameError: {startClusterDNS(t, ips[2], nxdomain.Addr), startClusterDNS(t, ips[3], nxdomain.Addr)},
	}
	addrOf := map[*harness.CoreDNS]string{fwd[dns.RcodeRefused][0]: ips[0], fwd[dns.RcodeRefused][1]: ips[1],
		fwd[dns.RcodeNameError][0]: ips[2], fwd[dns.RcodeNameError][1]: ips[3]}

	// forward passes the rcode and the EDE through, and a reply cut over UDP as it is; cache drops
	// the EDE (it keeps no OPT record) and caches NXDOMAIN, never REFUSED nor a cut reply.
	t.Run("forward", func(t *testing.T) {
		for _, withCache := range []bool{false, true} {
			for _, rcode := range []int{dns.RcodeRefused, dns.RcodeNameError} {
				up := map[int]*dnsProxy{dns.RcodeRefused: refused, dns.RcodeNameError: nxdomain}[rcode]
				cache := ""
				if withCache {
					cache = "\n    cache 30"
				}
				c := harness.StartCoreDNS(t, nil, fmt.Sprintf("global:{{.Port}} {\n    bind 127.0.0.1%s\n    forward . %s\n}\n", cache, up.Addr))
				before := up.Count("bar.global.")
				var seen []string
				for i := range 3 {
					for _, proto := range []string{"udp", "tcp"} {
						r := exchange(t, c.Addr, proto, "bar.global.", true)
						ede := extendedError(r)
						seen = append(seen, fmt.Sprintf("%s %s TC=%v EDE=%v", proto, dns.RcodeToString[r.Rcode], r.Truncated, ede != nil))
						if r.Rcode != rcode {
							t.Errorf("cache=%v: %s through forward, want %s", withCache, dns.RcodeToString[r.Rcode], dns.RcodeToString[rcode])
						}
						// Over UDP the NXDOMAIN with its EDE is more than three times the query: cut (TC),
						// which forward passes on and cache does not keep, but for the NXDOMAIN cached
						// from TCP since; the client asks over TCP.
						if cut := proto == "udp" && !(withCache && rcode == dns.RcodeNameError && i > 0); cut != r.Truncated {
							t.Errorf("cache=%v, %s over %s: TC %v", withCache, dns.RcodeToString[rcode], proto, r.Truncated)
						} else if keep := ede != nil && strings.Contains(ede.ExtraText, ns1); !cut && keep == withCache {
							t.Errorf("cache=%v, %s: EDE %v", withCache, dns.RcodeToString[rcode], ede)
						}
					}
				}
				n := up.Count("bar.global.") - before
				t.Logf("%s, cache=%v: 6 queries (UDP, TCP, ...) through forward: %s; %d reached the plugin",
					dns.RcodeToString[rcode], withCache, strings.Join(seen, ", "), n)
				// cache keeps the NXDOMAIN asked over TCP, not the one cut over UDP before it.
				if want := map[bool]int{false: 6, true: 2}[withCache && rcode == dns.RcodeNameError]; n != want {
					t.Errorf("cache=%v, %s: %d of 6 queries reached the plugin, want %d", withCache, dns.RcodeToString[rcode], n, want)
				}
			}
		}

		// Two upstreams: forward does not try the second on REFUSED unless told to (failover).
		second := startDNSProxy(t, g.Addr, true)
		for _, failover := range []bool{false, true} {
			opt := ""
			if failover {
				opt = "\n        failover REFUSED"
			}
			c := harness.StartCoreDNS(t, nil, fmt.Sprintf(`global:{{.Port}} {
    bind 127.0.0.1
    forward . %s %s {
        policy sequential%s
    }
}
`, refused.Addr, second.Addr, opt))
			b1, b2 := refused.Count("bar.global."), second.Count("bar.global.")
			r := exchange(t, c.Addr, "udp", "bar.global.", true)
			n1, n2 := refused.Count("bar.global.")-b1, second.Count("bar.global.")-b2
			t.Logf("forward . A B {policy sequential, failover=%v}: %s; A asked %d, B asked %d", failover, dns.RcodeToString[r.Rcode], n1, n2)
			if r.Rcode != dns.RcodeRefused || n1 != 1 || n2 != map[bool]int{false: 0, true: 1}[failover] {
				t.Errorf("failover=%v: %s, upstreams asked %d and %d", failover, dns.RcodeToString[r.Rcode], n1, n2)
			}
		}
	})

	t.Run("clients", func(t *testing.T) {
		bin := builtLookup(t)
		clients := []string{"getent", "cgo", "go"}
		if bin.cgo == "" {
			clients = []string{"getent", "go"}
		}
		search := fmt.Sprintf("search %s.svc.cluster.local svc.cluster.local cluster.local\n", ns1)
		profiles := []struct{ name, conf string }{
			{"ndots:5, 1 nameserver", search + "nameserver %[1]s\noptions ndots:5\n"},
			{"ndots:1, 1 nameserver", search + "nameserver %[1]s\noptions ndots:1\n"},
			{"ndots:1, 2 nameservers", search + "nameserver %[1]s\nnameserver %[2]s\noptions ndots:1\n"},
		}
		var table []string
		for _, p := range profiles {
			for _, client := range clients {
				for _, rcode := range []int{dns.RcodeRefused, dns.RcodeNameError} {
					f := fwd[rcode]
					rc := writeFile(t, "resolv.conf", fmt.Sprintf(p.conf, addrOf[f[0]], addrOf[f[1]]))
					marks := [2]int{len(f[0].Logs()), len(f[1].Logs())}
					res := bin.run(t, client, rc, "bar.global")
					q := [2]string{queriesSince(t, f[0], addrOf[f[0]], marks[0]), queriesSince(t, f[1], addrOf[f[1]], marks[1])}
					if len(res.Addrs) != 0 {
						t.Errorf("%s, %s, %s: the ambiguous name resolved to %v", client, dns.RcodeToString[rcode], p.name, res.Addrs)
					}
					outcome := res.Err
					switch {
					case client == "getent":
						outcome = fmt.Sprintf("exit %d", res.Exit)
					case res.NotFound:
						outcome += " (IsNotFound)"
					case res.Temporary:
						outcome += " (IsTemporary)"
					}
					outcome = strings.NewReplacer(addrOf[f[0]], "ns1", addrOf[f[1]], "ns2").Replace(outcome)
					row := fmt.Sprintf("| %s | %s | %s | %s | %.1f | %s | %s |", client, dns.RcodeToString[rcode], p.name, outcome, res.Ms, q[0], q[1])
					table = append(table, strings.ReplaceAll(row, ns1, "<ns>"))
				}
			}
		}
		t.Logf("glibc %s, %s\n| client | rcode | resolv.conf | application sees | ms | queries at nameserver 1 | at nameserver 2 |\n|---|---|---|---|---|---|---|\n%s",
			glibcVersion(), bin.goVersion, strings.Join(table, "\n"))
	})
}

// startClusterDNS starts a bin/coredns standing in for the cluster DNS on ip:53: global
// forwarded to upstream as docs/install.md's step 2 configures it, cluster.local answered
// NXDOMAIN (the search domains), every query logged. The harness's readiness probe uses a block
// on 127.0.0.1.
func startClusterDNS(t *testing.T, ip, upstream string) *harness.CoreDNS {
	t.Helper()
	return harness.StartCoreDNS(t, nil, fmt.Sprintf(`.:{{.Port}} {
    bind 127.0.0.1
    whoami
}
global:53 {
    bind %[1]s
    log . "Q {type} {name} {rcode}"
    errors
    forward . %[2]s
}
cluster.local:53 {
    bind %[1]s
    log . "Q {type} {name} {rcode}"
    template ANY ANY {
        rcode NXDOMAIN
        authority "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"
    }
}
`, ip, upstream))
}

// queriesSince waits until c has logged a marker query sent now, then summarizes the queries it
// logged from byte offset `from` on: "name rcode ×count", in order of first appearance (A and
// AAAA together).
func queriesSince(t *testing.T, c *harness.CoreDNS, ip string, from int) string {
	t.Helper()
	marker := fmt.Sprintf("marker-%d.cluster.local.", rand.Uint32())
	exchange(t, ip+":53", "udp", marker, false)
	var logs string
	harness.Eventually(t, "the marker in the log", func() error {
		logs = c.Logs()[from:]
		if !strings.Contains(logs, marker) {
			return fmt.Errorf("no %s", marker)
		}
		return nil
	})
	var order []string
	count := map[string]int{}
	for _, l := range strings.Split(logs, "\n") {
		i := strings.Index(l, "Q ")
		if i < 0 || strings.Contains(l, marker) {
			continue
		}
		f := strings.Fields(l[i:])
		if len(f) != 4 {
			continue
		}
		key := strings.TrimSuffix(f[2], ".") + " " + f[3]
		if count[key] == 0 {
			order = append(order, key)
		}
		count[key]++
	}
	if len(order) == 0 {
		return "none"
	}
	var out []string
	for _, k := range order {
		out = append(out, fmt.Sprintf("%s ×%d", k, count[k]))
	}
	return strings.Join(out, ", ")
}

// exchange sends one A question to addr, with or without EDNS.
func exchange(t *testing.T, addr, proto, qname string, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(qname, dns.TypeA)
	if edns {
		m.SetEdns0(1232, false)
	}
	r, _, err := (&dns.Client{Net: proto, Timeout: 2 * time.Second}).Exchange(m, addr)
	testkit.Must(t, err)
	return r
}

// loopbackBlocks counts the blocks 127.53.x.0/24 handed out, each once, from a random one on.
var (
	loopbackBlocks atomic.Int32
	loopbackStart  = rand.Int32N(250)
)

// loopbackIPs returns n addresses 127.53.x.1 ... whose port 53 is free over UDP and TCP.
func loopbackIPs(t *testing.T, n int) []string {
	t.Helper()
	for range 20 {
		var ips []string
		// A block of its own: tests run in parallel, and a free port is free for all of them.
		x := 1 + int(loopbackStart+loopbackBlocks.Add(1))%250
		for i := 1; i <= n; i++ {
			ip := fmt.Sprintf("127.53.%d.%d", x, i)
			pc, err := net.ListenPacket("udp", ip+":53")
			if err != nil {
				break
			}
			ln, err := net.Listen("tcp", ip+":53")
			pc.Close()
			if err != nil {
				break
			}
			ln.Close()
			ips = append(ips, ip)
		}
		if len(ips) == n {
			return ips
		}
	}
	t.Fatal("no free loopback addresses for port 53")
	return nil
}

// dnsProxy passes queries to upstream over the protocol they came in on and counts them by name.
// With refused, an NXDOMAIN answer with an Extended DNS Error (only the ambiguous short name has
// one here), or cut to fit three times the query over UDP, becomes REFUSED without the SOA,
// keeping the rest, the EDE included.
type dnsProxy struct {
	Addr     string
	upstream string
	refused  bool

	mu    sync.Mutex
	count map[string]int
}

func startDNSProxy(t *testing.T, upstream string, refused bool) *dnsProxy {
	t.Helper()
	p := &dnsProxy{upstream: upstream, refused: refused, count: map[string]int{}}
	var udp, tcp *dns.Server
	for attempt := 0; ; attempt++ {
		p.Addr = freeAddr(t)
		pc, err := net.ListenPacket("udp", p.Addr)
		if err == nil {
			ln, lerr := net.Listen("tcp", p.Addr)
			if lerr == nil {
				udp, tcp = &dns.Server{PacketConn: pc, Handler: p}, &dns.Server{Listener: ln, Handler: p}
				break
			}
			pc.Close()
			err = lerr
		}
		if attempt == 3 {
			t.Fatal(err)
		}
	}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
	return p
}

func (p *dnsProxy) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) == 1 {
		p.mu.Lock()
		p.count[strings.ToLower(req.Question[0].Name)]++
		p.mu.Unlock()
	}
	c := &dns.Client{Net: w.LocalAddr().Network(), Timeout: 2 * time.Second}
	r, _, err := c.Exchange(req, p.upstream)
	if err != nil {
		w.WriteMsg(new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
		return
	}
	if p.refused && r.Rcode == dns.RcodeNameError && (extendedError(r) != nil || r.Truncated) && req.Opcode == dns.OpcodeQuery {
		r.Rcode = dns.RcodeRefused
		r.Authoritative = false
		r.Ns = nil
	}
	w.WriteMsg(r)
}

// Count is how many queries for qname the proxy has seen.
func (p *dnsProxy) Count(qname string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[qname]
}

// lookupBin is testdata/lookup as `make test` builds it; cgo is its cgo build (empty where the
// Makefile found no C compiler), which the cgo client needs.
type lookupBin struct{ pure, cgo, goVersion string }

func builtLookup(t *testing.T) lookupBin {
	t.Helper()
	var b lookupBin
	var err error
	b.pure, err = harness.Built(harness.EnvLookupBin, "test")
	testkit.Must(t, err)
	if b.cgo, err = harness.Built(harness.EnvLookupCgoBin, "test"); err != nil {
		t.Logf("no cgo build (%v): glibc only through getent", err)
		b.cgo = ""
	}
	info, err := buildinfo.ReadFile(b.pure)
	testkit.Must(t, err)
	b.goVersion = info.GoVersion
	return b
}

// lookupResult is the helper's line of JSON.
type lookupResult struct {
	Addrs               []string
	Err                 string
	NotFound, Temporary bool
	Exit                int
	Ms                  float64
}

// run runs the lookup helper's client for name in a mount namespace whose /etc/resolv.conf is
// resolvConf.
func (b lookupBin) run(t *testing.T, client, resolvConf, name string) (r lookupResult) {
	t.Helper()
	bin, godebug := b.pure, "netdns=go"
	if client == "cgo" {
		bin, godebug = b.cgo, "netdns=cgo"
	}
	cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --bind "$1" /etc/resolv.conf && shift && exec "$@"`,
		"sh", resolvConf, bin, "-client", client, name)
	cmd.Env = append(os.Environ(), "GODEBUG="+godebug)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", client, err, out)
	}
	testkit.Must(t, json.Unmarshal(out, &r))
	return r
}

func glibcVersion() string {
	out, _ := exec.Command("getconf", "GNU_LIBC_VERSION").Output()
	return strings.TrimSpace(string(out))
}
