// Package integration tests the real bin/coredns against a real control plane: etcd,
// kube-apiserver and kube-controller-manager from test/harness, queried over UDP and TCP.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
	"k8s.io/client-go/kubernetes"
)

// cp is the control plane every test shares; each test works in namespaces of its own.
//
// The tests wait on processes far more than they compute, so they run in parallel (t.Parallel)
// unless they say why not (a "Serial:" comment): a parallel test has namespaces, Nodes, ports and
// loopback addresses of its own (the client-locality tests: Node and Pod addresses in a range of
// their own, 10.61 to 10.64), its writer is confined to its namespaces under a lease of its own,
// and it changes no cluster-scoped object another test reads; a test that stops or restarts an API
// server starts a control plane of its own. The tests that count failed queries or measure their
// replica's heap hold their bounds beside the others: the machine's load is no excuse for either.
// `go test` runs the serial tests first, then the parallel ones, -parallel at a time.
var cp *harness.ControlPlane

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var err error
	cp, err = harness.StartControlPlane(ctx, harness.Options{CoreDNSUser: &suiteWriter, ExtraTokens: append(suffixWriterTokens(), writer),
		// Which type-checks admission policies: TestWriterPolicy reads its verdict.
		Controllers: []string{"validatingadmissionpolicy-status-controller"}})
	if err == nil {
		if err = installWriterPolicy(ctx, cp); err != nil {
			cp.Stop()
		}
	}
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	cp.Stop()
	os.Exit(code)
}

var nsCounter atomic.Int32

// namespace creates a fresh namespace for t.
func namespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), nsCounter.Add(1))
	if len(ns) > 63 {
		ns = ns[len(ns)-63:]
	}
	ns = strings.Trim(ns, "-")
	must(t, harness.EnsureNamespace(context.Background(), client(), ns))
	return ns
}

func client() kubernetes.Interface { return cp.Client }

// repoPath is the absolute path of rel, a path from the repository's root (the root without one).
func repoPath(t *testing.T, rel ...string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	must(t, err)
	return filepath.Join(append([]string{root}, rel...)...)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// patience bounds every wait: generous, because a loaded CI machine is slow, not because
// anything should take long.
const patience = 60 * time.Second

// eventually retries check until it returns nil or patience runs out.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	eventuallyWithin(t, patience, what, check)
}

// eventuallyLong is eventually for recoveries bounded by client-go's reconnect backoff (up to 30 s
// after an outage) on top of the usual patience.
func eventuallyLong(t *testing.T, what string, check func() error) {
	t.Helper()
	eventuallyWithin(t, patience+30*time.Second, what, check)
}

func eventuallyWithin(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ask sends one question over proto with a 4096-byte EDNS buffer.
func ask(t *testing.T, c *harness.CoreDNS, proto, qname string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(qname), qtype)
	m.SetEdns0(4096, false)
	return c.Exchange(t, m, proto)
}

// render is a section as compact strings in order, without owner names and TTLs: "A 10.0.0.1",
// "SRV 0 50 5432 foo-0.east.foo.db.global.".
func render(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, "A "+r.A.String())
		case *dns.AAAA:
			out = append(out, "AAAA "+r.AAAA.String())
		case *dns.SRV:
			out = append(out, fmt.Sprintf("SRV %d %d %d %s", r.Priority, r.Weight, r.Port, r.Target))
		case *dns.OPT:
		default:
			out = append(out, dns.TypeToString[rr.Header().Rrtype]+" "+strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
	}
	return out
}

// expect checks one answer's rcode and answer section, in order, over both UDP and TCP.
func expect(t *testing.T, c *harness.CoreDNS, qname string, qtype uint16, rcode int, answer ...string) error {
	t.Helper()
	return expectAnswer(t, c, qname, qtype, rcode, true, answer)
}

// expectAnyOrder is expect for a server that promises no order: the stock kubernetes plugin
// answers a headless Service's EndpointSlices in its informer index's map order, which can stay
// the same for seconds, so waiting for one order waits on luck.
func expectAnyOrder(t *testing.T, c *harness.CoreDNS, qname string, qtype uint16, rcode int, answer ...string) error {
	t.Helper()
	return expectAnswer(t, c, qname, qtype, rcode, false, answer)
}

// expectAnswer is expect, and expectAnyOrder when ordered is false: then both lists are compared sorted.
func expectAnswer(t *testing.T, c *harness.CoreDNS, qname string, qtype uint16, rcode int, ordered bool, answer []string) error {
	t.Helper()
	if !ordered {
		answer = slices.Sorted(slices.Values(answer))
	}
	for _, proto := range []string{"udp", "tcp"} {
		m := ask(t, c, proto, qname, qtype)
		got := render(m.Answer)
		if !ordered {
			slices.Sort(got)
		}
		if m.Rcode != rcode || strings.Join(got, "|") != strings.Join(answer, "|") {
			return fmt.Errorf("%s %s over %s:\n got %s %q\nwant %s %q", qname, dns.TypeToString[qtype], proto,
				dns.RcodeToString[m.Rcode], got, dns.RcodeToString[rcode], answer)
		}
		if rcode == dns.RcodeNameError || (rcode == dns.RcodeSuccess && len(answer) == 0) {
			if len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA {
				return fmt.Errorf("%s %s over %s: negative answer without the zone SOA: %v", qname, dns.TypeToString[qtype], proto, m.Ns)
			}
		}
	}
	return nil
}

// eventuallyExpect waits until expect holds.
func eventuallyExpect(t *testing.T, c *harness.CoreDNS, qname string, qtype uint16, rcode int, answer ...string) {
	t.Helper()
	eventually(t, "answer", func() error { return expect(t, c, qname, qtype, rcode, answer...) })
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return string(b)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// freeAddr returns a loopback address whose TCP and UDP ports are both free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr()
	must(t, err)
	return addr
}
