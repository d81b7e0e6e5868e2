package history

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"
)

// fault does one thing that goes wrong with the machinery rather than the clusters.
func (h *History) fault() string {
	switch h.rng.IntN(5) {
	case 0, 1:
		// One replica loses the API server while the clusters change; with etcd compacted
		// and the API server restarted meanwhile, its watches cannot resume and must relist.
		h.proxy.Cut()
		var changes []string
		for range 1 + h.rng.IntN(3) {
			changes = append(changes, h.change())
		}
		relist := h.rng.IntN(2) == 0
		if relist {
			h.compactAndRestart()
		}
		h.proxy.Restore()
		return fmt.Sprintf("replica 1 partitioned (relist=%t) while: %s", relist, strings.Join(changes, "; "))
	case 2:
		h.compactAndRestart()
		return "etcd compacted, kube-apiserver restarted"
	case 3:
		i := h.rng.IntN(2)
		if h.soak {
			i = 1
		}
		h.replace(i, true)
		return fmt.Sprintf("replica %d killed and replaced", i)
	default:
		i := slices.IndexFunc(h.Replicas(), func(c *harness.CoreDNS) bool { return c.Metric(h.t, "coredns_global_leader") == "1" })
		what := fmt.Sprintf("the leader, replica %d, stopped and replaced", i)
		switch {
		case i < 0:
			i, what = 1, "replica 1 stopped and replaced, no replica leading"
		case h.soak && i != 1:
			i, what = 1, "replica 1, not the leader, stopped and replaced"
		}
		h.replace(i, false) // SIGTERM: a leader releases the lease on the way out
		return what
	}
}

// replace stops replica i (kill -9, or SIGTERM which releases the lease) and starts another.
func (h *History) replace(i int, kill bool) {
	h.mu.Lock()
	old := h.replicas[i]
	h.mu.Unlock()
	if kill {
		old.Kill()
	} else {
		old.Stop()
	}
	c := h.start(i)
	h.mu.Lock()
	h.replicas[i] = c
	h.mu.Unlock()
}

// start starts replica i, the second through the proxy.
func (h *History) start(i int) *harness.CoreDNS {
	if i == 1 {
		return harness.StartCoreDNS(h.t, h.cp, h.corefile, harness.WithKubeconfig(h.viaProxy))
	}
	return harness.StartCoreDNS(h.t, h.cp, h.corefile)
}

// compactAndRestart compacts etcd and restarts kube-apiserver: every watch must relist.
func (h *History) compactAndRestart() {
	_, err := h.cp.CompactEtcd(h.ctx)
	testkit.Must(h.t, err)
	h.cp.StopAPIServer()
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	testkit.Must(h.t, h.cp.StartAPIServer(ctx))
}
