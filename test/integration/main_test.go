// Package integration tests the real bin/coredns against a real control plane: etcd,
// kube-apiserver and kube-controller-manager from test/harness, queried over UDP and TCP.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

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
	// The tests' clients wait on sockets far more than they compute, and count a query not
	// answered within a second as failed. At the machine's two Ps the garbage collector's worker
	// takes one while it marks, and a long stretch that cannot be preempted on the other (a hash
	// or a copy of a large buffer) stalls every client of every test as long: an execution trace
	// showed 1.0 s, and TCP queries failing in TestGatewayLiveness while CoreDNS had answered. With
	// more Ps than cores the kernel shares the time instead.
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 4))
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
	testkit.Must(t, harness.EnsureNamespace(context.Background(), client(), ns))
	return ns
}

func client() kubernetes.Interface { return cp.Client }

// repoPath is the absolute path of rel, a path from the repository's root (the root without one).
func repoPath(t *testing.T, rel ...string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	testkit.Must(t, err)
	return filepath.Join(append([]string{root}, rel...)...)
}

// ask sends one question over proto with a 4096-byte EDNS buffer.
func ask(t *testing.T, c *harness.CoreDNS, proto, qname string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(qname), qtype)
	m.SetEdns0(4096, false)
	return c.Exchange(t, m, proto)
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
		got := harness.Render(m.Answer)
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
	harness.Eventually(t, "answer", func() error { return expect(t, c, qname, qtype, rcode, answer...) })
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	testkit.Must(t, err)
	return string(b)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	testkit.Must(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// freeAddr returns a loopback address whose TCP and UDP ports are both free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := harness.FreeAddr()
	testkit.Must(t, err)
	return addr
}
