// Package demo is what `make run` starts: a local control plane loaded with a Linkerd-style
// multicluster StatefulSet, and bin/coredns serving it with corefile/demo.Corefile.
package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
)

// Namespace and Service of the demo StatefulSet.
const (
	Namespace = "db"
	Service   = "foo"
)

// Options configure Run.
type Options struct {
	Addr     string    // DNS address; demo.Corefile's port is replaced by Addr's
	Corefile string    // path of the demo Corefile
	Dir      string    // working directory (control plane data, logs); removed at the end when empty
	Out      io.Writer // where the demo talks
}

// Demo is a running demo.
type Demo struct {
	CP      *harness.ControlPlane
	CoreDNS *harness.CoreDNS
	Addr    string
}

// Start starts the control plane, loads the demo objects and starts coredns. Stop undoes it all.
func Start(ctx context.Context, o Options) (*Demo, error) {
	corefile, err := os.ReadFile(o.Corefile)
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", o.Addr, err)
	}
	fmt.Fprintln(o.Out, "starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 ...")
	cp, err := harness.StartControlPlane(ctx, harness.Options{Dir: o.Dir})
	if err != nil {
		return nil, err
	}
	d := &Demo{CP: cp, Addr: o.Addr}
	if err := load(ctx, cp); err != nil {
		d.Stop()
		return nil, err
	}
	// The plugin reads $KUBECONFIG outside a pod; never let it find a real cluster instead.
	env := []string{"KUBECONFIG=" + cp.Kubeconfig, "KUBERNETES_SERVICE_HOST="}
	text := strings.Replace(string(corefile), "global:1053", "global:"+port, 1)
	if d.CoreDNS, err = harness.StartCoreDNSProcess(text, filepath.Join(cp.Dir, "coredns"), o.Out, env...); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// Stop stops coredns and the control plane.
func (d *Demo) Stop() {
	if d.CoreDNS != nil {
		d.CoreDNS.Stop()
	}
	d.CP.Stop()
}

// load creates what east sees: its own 3-pod StatefulSet foo, and foo mirrored from west and
// north as Linkerd's service mirror writes it.
func load(ctx context.Context, cp *harness.ControlPlane) error {
	c := cp.Client
	if err := harness.EnsureNamespace(ctx, c, Namespace); err != nil {
		return err
	}
	ports := []harness.Port{{Name: "tcp-db", Port: 5432}}
	for _, n := range []harness.Node{
		{Name: "east-a", Zone: "us-east-1a", Region: "us-east-1"},
		{Name: "east-b", Zone: "us-east-1b", Region: "us-east-1"},
	} {
		if err := harness.CreateNode(ctx, c, n); err != nil {
			return err
		}
	}
	if err := harness.CreateStatefulSet(ctx, c, harness.StatefulSet{Namespace: Namespace, Service: Service, Ports: ports, Pods: []harness.Pod{
		{Name: "foo-0", Node: "east-a", IP: "10.244.1.10", Ready: true},
		{Name: "foo-1", Node: "east-b", IP: "10.244.2.11", Ready: true},
		{Name: "foo-2", Node: "east-a", IP: "10.244.1.12", Ready: true},
	}}); err != nil {
		return err
	}
	for _, cluster := range []string{"west", "north"} {
		if _, err := harness.CreateMirror(ctx, c, harness.Mirror{Namespace: Namespace, Service: Service, Cluster: cluster, Ports: ports,
			Labels:    map[string]string{"app": Service},
			Endpoints: []harness.RemoteEndpoint{{Hostname: "foo-0", Ready: true}, {Hostname: "foo-1", Ready: true}},
		}); err != nil {
			return err
		}
	}
	return nil
}

// Query is a query the demo suggests trying: class IN unless Class says CH, over UDP unless TCP.
type Query struct {
	Name, Type, Class string
	TCP               bool
}

// Queries are what the demo suggests trying. An explanation (CH TXT) is a line per record, longer
// than the 512 bytes of a UDP answer without EDNS, which would keep only its first lines: it is
// asked over TCP.
func Queries() []Query {
	return []Query{
		{Name: "foo.global", Type: "A"},
		{Name: "foo.db.global", Type: "A"},
		{Name: "_tcp-db._tcp.foo.db.global", Type: "SRV"},
		{Name: "west.foo.db.global", Type: "A"},
		{Name: "foo-1.north.foo.db.global", Type: "A"},
		{Name: "foo.db.global", Type: "TXT", Class: "CH", TCP: true}, // why: each record's cluster, tier and state
	}
}

// WaitAnswers polls until foo.db.global has all 7 records (3 local + 2 + 2 mirrored), so what
// the demo prints is the settled state.
func (d *Demo) WaitAnswers(ctx context.Context) error {
	c := &dns.Client{Timeout: time.Second}
	m := new(dns.Msg)
	m.SetQuestion("foo.db.global.", dns.TypeA)
	for {
		if r, _, err := c.ExchangeContext(ctx, m, d.Addr); err == nil && len(r.Answer) == 7 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("foo.db.global never had its 7 records: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Show prints each suggested query with its answer, as dig would show the answer section.
func (d *Demo) Show(w io.Writer) {
	host, port, _ := net.SplitHostPort(d.Addr)
	for _, q := range Queries() {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(q.Name), dns.StringToType[q.Type])
		class, flags, c := "", "", &dns.Client{Timeout: time.Second}
		if q.Class != "" {
			m.Question[0].Qclass, class = dns.StringToClass[q.Class], q.Class+" "
		}
		if q.TCP {
			flags, c.Net = " +tcp", "tcp"
		}
		r, _, err := c.Exchange(m, d.Addr)
		fmt.Fprintf(w, "\n$ dig @%s -p %s %s%s %s%s +short\n", host, port, class, q.Type, q.Name, flags)
		if err != nil {
			fmt.Fprintf(w, "  (error: %v)\n", err)
			continue
		}
		for _, rr := range r.Answer {
			fmt.Fprintf(w, "  %s\n", strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
		if len(r.Answer) == 0 {
			fmt.Fprintf(w, "  (%s)\n", dns.RcodeToString[r.Rcode])
		}
		if r.Truncated {
			fmt.Fprintf(w, "  (truncated)\n")
		}
	}
}
