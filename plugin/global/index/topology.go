package index

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/globaldns/global/plugin/global/contract"
)

// Well-known locality keys; `zone` and `region` in the Corefile are short for these.
const (
	ZoneKey   = contract.ZoneKey
	RegionKey = contract.RegionKey
)

// DefaultKeys is the default preference order: the same zone is better than the same region.
var DefaultKeys = contract.DefaultTopology()

// Topology ranks clusters. Tier 0 is this cluster; a linked cluster gets tier i for the first
// preference key Keys[i-1] on which its locality equals this cluster's, and len(Keys)+1 otherwise.
// It is immutable once in use: a change is a new Topology (see Index.SetTopology).
type Topology struct {
	Local   string   // this cluster's name
	Unnamed bool     // Local is a default: nothing names this cluster
	Keys    []string // preference keys, most specific first
	// ClientKeys rank records from a known client (ClientTier): the `topology` keys as given,
	// hostname and cluster included, else DefaultClientKeys.
	ClientKeys []string
	Locality   map[string]map[string]string // cluster -> key -> value
	// Where Local and each cluster's Locality come from: a Source; FromCorefile when unset.
	LocalFrom    string
	LocalityFrom map[string]string
	// Linked are the clusters Linkerd's Links name, where the Link CRD is served: then a Service
	// is a mirror of a cluster only while a Link names it. nil: any cluster a mirror claims.
	Linked map[string]bool
}

// Where a topology's facts come from.
const (
	FromDefault         = "default"         // nothing says: `cluster`'s default
	FromCorefile        = "corefile"        // `cluster`, `locality`
	FromClusterProperty = "clusterproperty" // the ClusterProperty cluster.clusterset.k8s.io (KEP-2149)
	FromLink            = "link"            // the labels of the cluster's Linkerd Link
	FromNodes           = "nodes"           // the labels every Node of this cluster shares
)

// Discovered is what the cluster's objects say of its topology (see watch.Topology): this
// cluster's name, the locality labels of each linked cluster's Link, and those all this
// cluster's Nodes share. Empty fields say nothing.
type Discovered struct {
	Cluster string
	Links   map[string]map[string]string // linked cluster -> key -> value
	Linked  map[string]bool              // the clusters Links name; nil: Links unknown (no Link CRD)
	Nodes   map[string]string            // key -> value
}

// With returns the topology of t, the Corefile's, completed by d: what the Corefile says wins,
// and each disagreement of d with it is returned as a warning. A cluster's locality comes whole
// from one source.
func (t *Topology) With(d Discovered) (*Topology, []string) {
	out := &Topology{Local: t.Local, Unnamed: t.Unnamed, Keys: t.Keys, ClientKeys: t.ClientKeys, Locality: map[string]map[string]string{},
		LocalFrom: t.localFrom(), LocalityFrom: map[string]string{}, Linked: d.Linked}
	var warnings []string
	for c, l := range t.Locality {
		out.Locality[c], out.LocalityFrom[c] = l, FromCorefile
	}
	switch {
	case d.Cluster == "":
	case t.Unnamed:
		out.Local, out.Unnamed, out.LocalFrom = d.Cluster, false, FromClusterProperty
	case d.Cluster != t.Local:
		warnings = append(warnings, fmt.Sprintf("this cluster is %q in the Corefile (`cluster`) and %q in its ClusterProperty cluster.clusterset.k8s.io: the Corefile's is used", t.Local, d.Cluster))
	}
	learn := func(cluster string, l map[string]string, from string) {
		switch have, ok := out.Locality[cluster]; {
		case len(l) == 0:
		case !ok:
			out.Locality[cluster], out.LocalityFrom[cluster] = l, from
		case contradicts(have, l) && out.LocalityFrom[cluster] == FromCorefile:
			warnings = append(warnings, fmt.Sprintf("cluster %q is at %s in the Corefile (`locality`) and at %s by its %s: the Corefile's is used",
				cluster, contract.DescribeLocality(have), contract.DescribeLocality(l), map[string]string{FromLink: "Link", FromNodes: "Nodes"}[from]))
		}
	}
	learn(out.Local, d.Nodes, FromNodes)
	for _, c := range slices.Sorted(maps.Keys(d.Links)) {
		if c != out.Local {
			learn(c, d.Links[c], FromLink)
		}
	}
	return out, warnings
}

// contradicts reports whether a and b give a key different values.
func contradicts(a, b map[string]string) bool {
	for k, v := range b {
		if w, ok := a[k]; ok && w != v {
			return true
		}
	}
	return false
}

// NamedBy returns what named this cluster: a Source.
func (t *Topology) NamedBy() string { return t.localFrom() }

func (t *Topology) localFrom() string {
	switch {
	case t.Unnamed:
		return FromDefault
	case t.LocalFrom != "":
		return t.LocalFrom
	}
	return FromCorefile
}

// From returns where cluster's locality comes from, "" when it has none.
func (t *Topology) From(cluster string) string {
	if _, ok := t.Locality[cluster]; !ok {
		return ""
	}
	return cmp.Or(t.LocalityFrom[cluster], FromCorefile)
}

// Equal reports whether t and o rank and name clusters alike, from the same sources.
func (t *Topology) Equal(o *Topology) bool {
	return t.Local == o.Local && t.Unnamed == o.Unnamed && t.localFrom() == o.localFrom() && slices.Equal(t.Keys, o.Keys) && slices.Equal(t.ClientKeys, o.ClientKeys) &&
		maps.EqualFunc(t.Locality, o.Locality, maps.Equal) && maps.Equal(t.LocalityFrom, o.LocalityFrom) &&
		(t.Linked == nil) == (o.Linked == nil) && maps.Equal(t.Linked, o.Linked)
}

// DescribeLocality renders cluster's locality as key:value pairs (zone and region short), "none".
func (t *Topology) DescribeLocality(cluster string) string {
	return contract.DescribeLocality(t.Locality[cluster])
}

// Tier returns the tier of cluster.
func (t *Topology) Tier(cluster string) uint8 {
	tier, _ := t.rank(cluster)
	return tier
}

// Why names what decided cluster's tier: "local", "<key>:<value>" for the first preference key
// whose value it shares with this cluster (zone and region for the well-known keys), or "none".
func (t *Topology) Why(cluster string) string {
	switch tier, key := t.rank(cluster); {
	case tier == 0:
		return "local"
	case key == "":
		return "none"
	default:
		return contract.ShortKey(key) + ":" + t.Locality[cluster][key]
	}
}

// rank returns the tier of cluster and the preference key that decided it ("" for none). It
// allocates nothing: every build asks it for each member.
func (t *Topology) rank(cluster string) (uint8, string) {
	self := Client{Labels: t.Locality[t.Local]} // the cluster's view: a client at its locality (firstShared)
	if t.sharesAt(cluster, "", "", &self, ClusterKey) {
		return 0, ""
	}
	i := t.firstShared(t.Keys, cluster, "", t.Zone(cluster), &self)
	if i == len(t.Keys) {
		return uint8(i + 1), ""
	}
	return uint8(i + 1), t.Keys[i]
}

// ClusterOf returns the name of member m's cluster: this cluster's for the local Service.
func (t *Topology) ClusterOf(m *Member) string {
	if m.Local() {
		return t.Local
	}
	return m.Cluster
}

// Zone returns the zone locality of cluster, "" when unknown.
func (t *Topology) Zone(cluster string) string { return t.Locality[cluster][ZoneKey] }

// Topology keys that are no node label: HostnameKey is the client's own node, ClusterKey this
// cluster.
const (
	HostnameKey = contract.HostnameKey
	ClusterKey  = contract.ClusterKey
)

// Client is where a querying client runs: its node's name and that node's labels. One per Node,
// shared by the queries from it: it remembers the tiers it sees (tiersFrom).
type Client struct {
	Node   string
	Labels map[string]string

	tiers atomic.Pointer[clientTiers]
}

// firstShared is the tier rule of the cluster's view and of a client's alike: the index in keys of
// the first key whose value a record of cluster, on node, in zone shares with client c (sharesAt),
// len(keys) for none. The cluster's view is a client at this cluster's locality, on no node, whose
// keys are the cluster's, then topology's locality keys (Topology.rank).
func (t *Topology) firstShared(keys []string, cluster, node, zone string, c *Client) int {
	for i, k := range keys {
		if t.sharesAt(cluster, node, zone, c, k) {
			return i
		}
	}
	return len(keys)
}

// sharesAt reports whether a record of cluster, on node in zone, and client c have the same value
// of key k. A local endpoint's node and zone are its EndpointSlice's; its other keys are this
// cluster's locality. A linked cluster's endpoints are at its locality, on no node the client
// could share.
func (t *Topology) sharesAt(cluster, node, zone string, c *Client, k string) bool {
	local := cluster == t.Local
	switch k {
	case ClusterKey:
		return local
	case HostnameKey:
		return local && node != "" && node == c.Node
	case ZoneKey:
		return zone != "" && zone == c.Labels[ZoneKey]
	}
	v := c.Labels[k]
	return v != "" && t.Locality[cluster][k] == v
}

// clientTiers are the tiers a client sees under one topology: of each kind of local record (on
// its node or not, in its zone or not) and of each linked cluster.
type clientTiers struct {
	topo     *Topology
	local    [2][2]uint8
	clusters []clusterTier // the linked clusters with a locality (a few: looked up without hashing)
	farthest uint8         // the others'

	// class is the client's labels that decide its tiers (classOf), and the hash of its class and
	// of its node: the key of remembered answers (memo.go).
	class               string
	classHash, nodeHash uint64
}

type clusterTier struct {
	cluster string
	tier    uint8
}
