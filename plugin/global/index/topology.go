package index

// Well-known locality keys; `zone` and `region` in the Corefile are short for these.
const (
	ZoneKey   = "topology.kubernetes.io/zone"
	RegionKey = "topology.kubernetes.io/region"
)

// DefaultKeys is the default preference order: the same zone is better than the same region.
var DefaultKeys = []string{ZoneKey, RegionKey}

// Topology ranks clusters. Tier 0 is this cluster; a linked cluster gets tier i for the first
// preference key Keys[i-1] on which its locality equals this cluster's, and len(Keys)+1 otherwise.
type Topology struct {
	Local    string                       // this cluster's name
	Unnamed  bool                         // Local is a default: the configuration names no cluster
	Keys     []string                     // preference keys, most specific first
	Locality map[string]map[string]string // cluster -> key -> value
}

// Tier returns the tier of cluster.
func (t *Topology) Tier(cluster string) uint8 {
	tier, _ := t.rank(cluster)
	return tier
}

// Why names what decided cluster's tier: "local", "<key>:<value>" for the first preference key
// whose value it shares with this cluster (zone and region for the well-known keys), or "none".
func (t *Topology) Why(cluster string) string {
	_, why := t.rank(cluster)
	return why
}

func (t *Topology) rank(cluster string) (uint8, string) {
	if cluster == t.Local {
		return 0, "local"
	}
	here, there := t.Locality[t.Local], t.Locality[cluster]
	for i, k := range t.Keys {
		if v := here[k]; v != "" && there[k] == v {
			switch k {
			case ZoneKey:
				k = "zone"
			case RegionKey:
				k = "region"
			}
			return uint8(i + 1), k + ":" + v
		}
	}
	return uint8(len(t.Keys) + 1), "none"
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
