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
	if cluster == t.Local {
		return 0
	}
	here, there := t.Locality[t.Local], t.Locality[cluster]
	for i, k := range t.Keys {
		if v := here[k]; v != "" && there[k] == v {
			return uint8(i + 1)
		}
	}
	return uint8(len(t.Keys) + 1)
}

// Zone returns the zone locality of cluster, "" when unknown.
func (t *Topology) Zone(cluster string) string { return t.Locality[cluster][ZoneKey] }
