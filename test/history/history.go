// Package history plays random histories of what Linkerd-linked clusters do (local pods, some
// dual-stack, created, made ready and not, deleted; services exported and not, ports renamed;
// mirrors, some IPv6, linked and unlinked; remote pods changing as Linkerd's service mirror writes
// them; gateways down and up; Links deleted and made again; namespaces deleted), with faults of
// the machinery between (a replica partitioned from the API server while things change, etcd
// compacted so watches must relist, kube-apiserver restarted, a replica killed, the leader
// stopped so the lease passes), against two bin/coredns replicas with the writer on. After every
// step, every answer of both replicas and every written object must equal the oracle
// (oracle.go), a function of the API's objects alone, within a generous deadline; no object of
// anyone else may carry a write of ours.
package history

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"
)

// corefile is the two replicas' Corefile: every namespace of the history, one lease, and slices
// of two endpoints, so that a few endpoints fill several written slices and move between them.
const corefile = `global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %s
        lease %s writer
        endpointslice_size 2
        cluster east
        locality east zone=us-east-1a region=us-east-1
        locality west zone=us-east-1b region=us-east-1
        locality north zone=eu-north-1a region=eu-north-1
        client_locality node
    }
}
`

// New starts two replicas for a history of seed in namespaces h<seed>-0..n-1 (two live
// at a time; each namespace deletion uses up one).
func New(t *testing.T, cp *harness.ControlPlane, seed int64, namespaces int, soak bool) *History {
	h := &History{t: t, cp: cp, ctx: context.Background(), seed: seed, rng: rand.New(rand.NewPCG(uint64(seed), 0x9e3779b9)),
		seen: map[string]bool{}, locals: map[string]*harness.StatefulSet{},
		mirrors: map[string]*harness.Mirror{}, down: map[string]bool{}, soak: soak}
	for i := range namespaces {
		h.namespaces = append(h.namespaces, fmt.Sprintf("h%d-%d", seed, i))
	}
	lease := fmt.Sprintf("h%d-lease", seed)
	testkit.Must(t, harness.EnsureNamespace(h.ctx, cp.Client, lease))
	h.linkClusters()
	for range 2 {
		h.createNamespace()
	}
	h.corefile = fmt.Sprintf(corefile, strings.Join(h.namespaces, " "), lease)
	h.proxy = harness.StartProxy(t, cp.APIServerAddr())
	var err error
	h.viaProxy, err = cp.KubeconfigVia(h.proxy, "")
	testkit.Must(t, err)
	h.replicas[0] = harness.StartCoreDNS(t, cp, h.corefile)
	h.replicas[1] = harness.StartCoreDNS(t, cp, h.corefile, harness.WithKubeconfig(h.viaProxy))
	h.converge("start")
	return h
}

// Step plays change or fault i, then waits for the oracle.
func (h *History) Step(i int) {
	var what string
	if h.rng.IntN(6) == 0 {
		what = h.fault()
	} else {
		what = h.change()
	}
	h.converge(fmt.Sprintf("%d: %s", i, what))
}

// converge waits until both replicas' answers and the written objects are the oracle's.
func (h *History) converge(step string) {
	h.t.Helper()
	h.log = append(h.log, step)
	start := time.Now()
	deadline := start.Add(harness.Patience + harness.Backoff)
	for n := 0; ; n++ {
		err := h.check([]string{"udp", "tcp"}[n%2])
		if err == nil {
			h.log[len(h.log)-1] += fmt.Sprintf(" (converged in %s)", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) && h.soak {
			h.t.Logf("seed %d: not converged after step %s: %v", h.seed, step, err)
			h.mismatches = append(h.mismatches, fmt.Sprintf("after step %s: %v", step, err))
			return
		}
		if time.Now().After(deadline) {
			want, _ := oracle(h.ctx, h.cp.Client, h.dyn, h.namespaces)
			var state []string
			for _, s := range want {
				state = append(state, fmt.Sprintf("%s/%s %v", s.ns, s.svc, sortRecords(s.records)))
			}
			slices.Sort(state)
			h.t.Fatalf("seed %d: not converged after step %s: %v\nthe oracle: %s\nthe history (replay: go test ./test/integration -run 'TestRandomHistory' -seed %d -steps %d):\n%s",
				h.seed, step, err, strings.Join(state, "; "), h.seed, len(h.log)-1, strings.Join(h.log, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check compares, once over proto, both replicas' answers and the written objects with the oracle.
func (h *History) check(proto string) error {
	want, err := oracle(h.ctx, h.cp.Client, h.dyn, h.namespaces)
	if err != nil {
		return err
	}
	var gone []string
	for k := range h.seen {
		gone = append(gone, k)
	}
	for k := range want {
		h.seen[k] = true
	}
	for i, r := range h.Replicas() {
		if err := checkAnswers(r, proto, want, gone); err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
	}
	if err := checkWritten(h.ctx, h.cp.Client, h.namespaces, want); err != nil {
		return err
	}
	return checkNothingForeign(h.ctx, h.cp.Client, h.namespaces)
}

// Replicas are the two replicas running now.
func (h *History) Replicas() []*harness.CoreDNS {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.replicas[:])
}

// Log is what the history did, step by step.
func (h *History) Log() []string { return h.log }

// Namespaces are every namespace of the history, created or still to be.
func (h *History) Namespaces() []string { return h.namespaces }

// Changes is how many cluster changes the history made (faults aside).
func (h *History) Changes() int { return h.changes }

// Mismatches are the steps that did not converge, in a soak (elsewhere the first fails the test).
func (h *History) Mismatches() []string { return h.mismatches }

// Names are the names of the global services the oracle says exist now.
func (h *History) Names() ([]string, error) {
	want, err := oracle(h.ctx, h.cp.Client, h.dyn, h.namespaces)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range want {
		out = append(out, s.name())
	}
	return out, nil
}
