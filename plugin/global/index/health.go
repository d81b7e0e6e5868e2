package index

import (
	"github.com/globaldns/global/plugin/global/telemetry"
)

// health counts the index's records per member cluster and state, for the records gauges, and
// tells when a linked cluster goes down or comes back: once per cluster, not once per record.
type health struct {
	counts   map[string]*clusterCounts
	reported map[string]clusterCounts // as last reported
	down     map[string]bool          // clusters reported down
	unnamed  bool                     // the cluster-name warning was given
	nowhere  map[string]bool          // clusters warned of having no locality
}

// ClusterRecords are a member cluster's counts in a snapshot: of global services it is a member
// of, and of its records by state.
type ClusterRecords struct {
	Services                                  int
	Ready, NotReady, Terminating, GatewayDown int
}

// snapshot returns the counts of every cluster with a member, for a Snapshot: a copy.
func (h *health) snapshot() map[string]ClusterRecords {
	out := make(map[string]ClusterRecords, len(h.counts))
	for cluster, c := range h.counts {
		if c.services > 0 {
			out[cluster] = ClusterRecords{Services: c.services, Ready: c.states[stateReady], NotReady: c.states[stateNotReady],
				Terminating: c.states[stateTerminating], GatewayDown: c.states[stateGatewayDown]}
		}
	}
	return out
}

func newHealth() health {
	return health{counts: map[string]*clusterCounts{}, reported: map[string]clusterCounts{}, down: map[string]bool{}, nowhere: map[string]bool{}}
}

// add counts svc's records with sign +1 (published) or -1 (replaced); svc may be nil. A big
// service has them counted already; a small one's records of a cluster are mostly adjacent: the
// map is asked once per run of them, not once per record.
func (h *health) add(svc *Service, sign int) {
	if svc != nil {
		for i := range svc.Members {
			h.of(svc.clusterName(i)).services += sign
		}
	}
	switch {
	case svc == nil:
	case svc.inc != nil:
		for i, n := range svc.inc.counts {
			h.of(svc.clusterName(i)).plus(n, sign)
		}
	default:
		var c *clusterCounts
		cluster := ""
		for r := range svc.Records().All() {
			if c == nil || r.Cluster != cluster {
				cluster = r.Cluster
				c = h.of(cluster)
			}
			c.add(r, svc.topo.Local, sign)
		}
	}
}

func (h *health) of(cluster string) *clusterCounts {
	c := h.counts[cluster]
	if c == nil {
		c = &clusterCounts{}
		h.counts[cluster] = c
	}
	return c
}

// add counts r, a record of this cluster's name local or a linked one's, with sign.
func (c *clusterCounts) add(r *Record, local string, sign int) {
	c.states[r.stateIndex()] += sign
	if r.Gateway == GatewayUnknown && r.Cluster != local {
		c.noPodMirror += sign
	}
}

// plus adds n times sign to c.
func (c *clusterCounts) plus(n clusterCounts, sign int) {
	for i := range c.states {
		c.states[i] += sign * n.states[i]
	}
	c.noPodMirror += sign * n.noPodMirror
}

// report sets the gauges of the clusters whose counts changed since the last report, and logs
// each cluster that went down (it has records, none ready, some with the gateway down) or came back,
// and, once, each member cluster that topo knows no locality of (it is in the last tier).
func (h *health) report(topo *Topology) {
	mirrors := 0
	for cluster, c := range h.counts {
		total := 0
		for _, n := range c.states {
			total += n
		}
		if cluster != topo.Local {
			mirrors += total
			h.warnNowhere(cluster, total > 0 && topo.From(cluster) == "", "linked cluster %q has no locality: it is in the last tier; "+
				"label its Linkerd Link with %s and %s, or give it a `locality` line")
		}
		if total == 0 { // unlinked, or its services went: nothing to be down or back
			h.forget(cluster, c.services == 0)
			continue
		}
		if last, ok := h.reported[cluster]; ok && last == *c {
			continue
		}
		for i, state := range states {
			telemetry.Records.WithLabelValues(cluster, state).Set(float64(c.states[i]))
		}
		telemetry.RecordsWithoutPodMirror.WithLabelValues(cluster).Set(float64(c.noPodMirror))
		h.reported[cluster] = *c

		down := c.states[stateGatewayDown] > 0 && c.states[stateReady] == 0
		switch {
		case down && !h.down[cluster]:
			telemetry.Log.Warningf("cluster %q is down: Linkerd's gateway probe fails, its %d records are answered as not ready", cluster, c.states[stateGatewayDown])
		case !down && h.down[cluster]:
			telemetry.Log.Infof("cluster %q is back: %d records ready", cluster, c.states[stateReady])
		}
		h.down[cluster] = down
		telemetry.ClusterDown.WithLabelValues(cluster).Set(b2f(down))
	}
	h.warnNowhere(topo.Local, mirrors > 0 && topo.From(topo.Local) == "", "this cluster (%q) has no locality while mirrors from "+
		"linked clusters exist: every linked cluster is in the last tier; give it a `locality` line, or %s and %s labels shared by "+
		"all its Nodes")
	unnamed := topo.Unnamed && mirrors > 0
	if unnamed && !h.unnamed {
		telemetry.Log.Warningf("the Corefile names no cluster (`cluster` is %q), nor does a ClusterProperty cluster.clusterset.k8s.io, "+
			"while mirrors from linked clusters exist: pods asking for their own per-cluster or per-pod name under the name the other "+
			"clusters use get NXDOMAIN", topo.Local)
	}
	h.unnamed = unnamed
	telemetry.ClusterUnnamed.Set(b2f(unnamed))
}

// warnNowhere logs format (of the cluster and the two topology keys) when cluster turns to have
// no locality that matters, nowhere, once until it has one.
func (h *health) warnNowhere(cluster string, nowhere bool, format string) {
	if nowhere && !h.nowhere[cluster] {
		telemetry.Log.Warningf(format, cluster, RegionKey, ZoneKey)
	}
	h.nowhere[cluster] = nowhere
}

// forget drops the gauges of a cluster that has no record left, and its counts when counts: when
// it is a member of no global service either.
func (h *health) forget(cluster string, counts bool) {
	if counts { // else it is still a member, of records
		delete(h.counts, cluster)
	}
	delete(h.reported, cluster)
	delete(h.down, cluster)
	delete(h.nowhere, cluster)
	telemetry.Records.DeletePartialMatch(map[string]string{"cluster": cluster})
	telemetry.RecordsWithoutPodMirror.DeleteLabelValues(cluster)
	telemetry.ClusterDown.DeleteLabelValues(cluster)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// countRecords counts s's records by member cluster (as s.clusters) and state.
func (s *Service) countRecords() []clusterCounts {
	counts := make([]clusterCounts, len(s.clusters))
	for r := range s.Records().All() {
		count(counts, s, r, 1)
	}
	return counts
}

// count adds sign to the count, in counts (as s.clusters), of r's cluster and state.
func count(counts []clusterCounts, s *Service, r *Record, sign int) {
	if i := s.clusterIndex(r.Cluster); i >= 0 {
		counts[i].add(r, s.topo.Local, sign)
	}
}
