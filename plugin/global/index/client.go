package index

import (
	"cmp"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"
)

// Ranking from the client: a record's tier as seen from the node a query comes from, the
// Kubernetes service topology rule (each key tried in order, the first one shared decides). The
// index's own tiers are the cluster's view (Topology.Tier); these are computed per query.

// DefaultClientKeys rank records from a known client when the Corefile sets no `topology`.
var DefaultClientKeys = contract.DefaultClientTopology()

// of returns the tier of linked cluster's records.
func (ct *clientTiers) of(cluster string) uint8 {
	for i := range ct.clusters {
		if ct.clusters[i].cluster == cluster {
			return ct.clusters[i].tier
		}
	}
	return ct.farthest
}

// tiersFrom returns the tiers c sees under topology t, computed once per topology (a Client lives
// as long as its Node's version, a topology until it changes).
func (c *Client) tiersFrom(t *Topology) *clientTiers {
	if ct := c.tiers.Load(); ct != nil && ct.topo == t {
		return ct
	}
	return c.computeTiers(t)
}

// computeTiers computes and keeps the tiers c sees under t: tiersFrom's work, out of line (see
// Service.places).
func (c *Client) computeTiers(t *Topology) *clientTiers {
	class := classOf(c, t)
	ct := &clientTiers{topo: t, farthest: t.tierAt("", "", "", c),
		class: class, classHash: maphash.String(memoSeed, class), nodeHash: nodeHash(c.Node)}
	for node, onNode := range [2]string{"", c.Node} {
		for zone, inZone := range [2]string{"", c.Zone()} {
			ct.local[node][zone] = t.tierAt(t.Local, onNode, inZone, c)
		}
	}
	for cluster := range t.Locality {
		if cluster != t.Local {
			ct.clusters = append(ct.clusters, clusterTier{cluster, t.tierAt(cluster, "", t.Zone(cluster), c)})
		}
	}
	c.tiers.Store(ct)
	return ct
}

// nodeHash is the hash of a node's name: a client's (clientTiers) and a service's hosts'
// (placements) must agree.
func nodeHash(node string) uint64 { return maphash.String(memoSeed, node) }

// Zone returns the client's zone, "" when its node has none.
func (c *Client) Zone() string { return c.Labels[ZoneKey] }

// ZoneOf returns the topology zone of record r: a local endpoint's EndpointSlice zone, a linked
// cluster's zone locality (Linkerd's mirrors carry none); "" when unknown.
func (t *Topology) ZoneOf(r *Record) string {
	if r.Cluster == t.Local {
		if r.Local == nil {
			return ""
		}
		return r.Local.Zone
	}
	return t.Locality[r.Cluster][ZoneKey]
}

// ClientTier returns the tier of record r seen from client c: i for the first of t.ClientKeys
// on which r's place and c's agree, len(t.ClientKeys) for none.
func (t *Topology) ClientTier(r *Record, c *Client) uint8 {
	return t.tierAt(r.Cluster, t.nodeOf(r), t.ZoneOf(r), c)
}

// tierAt is ClientTier of a record of cluster, on node (local records; "" for none) in zone.
func (t *Topology) tierAt(cluster, node, zone string, c *Client) uint8 {
	return uint8(t.firstShared(t.ClientKeys, cluster, node, zone, c))
}

// nodeOf returns the node of record r: a local endpoint's, "" for the rest.
func (t *Topology) nodeOf(r *Record) string {
	if r.Cluster != t.Local || r.Local == nil {
		return ""
	}
	return r.Local.NodeName
}

// ClientWhy names what decided r's tier from client c, as Why does for the cluster's tiers: the
// key they share (node:<name>, cluster, zone:<value>, ...) or none.
func (t *Topology) ClientWhy(r *Record, c *Client) string {
	for _, k := range t.ClientKeys {
		switch {
		case !t.shares(r, c, k):
		case k == HostnameKey:
			return "node:" + c.Node
		case k == ClusterKey:
			return ClusterKey
		default:
			return contract.ShortKey(k) + ":" + c.Labels[k]
		}
	}
	return "none"
}

// Describe renders the client's place: its node, then its labels of the client keys (zone and
// region short), "node:<name>,zone:<value>,...".
func (t *Topology) Describe(c *Client) string {
	parts := []string{"node:" + c.Node}
	for _, k := range t.ClientKeys {
		if v := c.Labels[k]; v != "" && k != HostnameKey {
			parts = append(parts, contract.ShortKey(k)+":"+v)
		}
	}
	return strings.Join(parts, ",")
}

// shares reports whether record r and client c have the same value of key k.
func (t *Topology) shares(r *Record, c *Client, k string) bool {
	return t.sharesAt(r.Cluster, t.nodeOf(r), t.ZoneOf(r), c, k)
}

// Ranked returns a copy of rs, each record with its tier as seen from client c, in answer order:
// by tier, then cluster, host and address, as the index orders its own; no more than limit.
func (t *Topology) Ranked(rs []Record, c *Client, limit int) []Record {
	out := slices.Clone(rs)
	// A linked cluster's records share their tier: it is looked up once per run of them.
	cluster, tier := "", uint8(0)
	for i := range out {
		switch r := &out[i]; {
		case r.Cluster == t.Local:
			r.Tier = t.ClientTier(r, c)
		case r.Cluster != cluster:
			cluster, tier = r.Cluster, t.ClientTier(r, c)
			fallthrough
		default:
			r.Tier = tier
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Tier, b.Tier), strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Host, b.Host), a.Addr().Compare(b.Addr()))
	})
	return out[:min(limit, len(out)):min(limit, len(out))]
}
