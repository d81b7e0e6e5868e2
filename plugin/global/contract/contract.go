// Package contract is what the global plugin shows the outside, written once: the names and
// defaults of its Corefile options and the reader of each (options.go; package stanza reads a
// whole `global` stanza with it, for the plugin, linkerd-global and the tests alike), the kinds of
// argument every option takes (args.go), the API access each option needs (access.go), the labels
// and Lease it writes, and the keys of its explanations with their one writer and one reader
// (explanation.go). The plugin, the linkerd-global CLI and the tests read it from here, and the
// chart is held to it by linkerd-global's TestChartKeepsTheContract, so that a drift between them
// fails to compile or fails a test. It depends on neither CoreDNS nor client-go: on apimachinery's
// validation only.
package contract

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Name is the plugin's name: its Corefile directive, and the zone its names live under.
const Name = "global"

// The locality keys of a cluster's place, as Kubernetes names them; `zone` and `region` are their
// short forms in the Corefile. HostnameKey and ClusterKey are the `topology` words for a client's
// own node and this cluster, which are no label of a locality.
const (
	ZoneKey     = "topology.kubernetes.io/zone"
	RegionKey   = "topology.kubernetes.io/region"
	HostnameKey = "kubernetes.io/hostname"
	ClusterKey  = "cluster"
)

// DefaultTopology are the keys deciding the cluster's tiers when the Corefile sets no `topology`.
func DefaultTopology() []string { return []string{ZoneKey, RegionKey} }

// DefaultClientTopology are the keys ranking records from a known client when the Corefile sets no
// `topology`: its node, its zone (this cluster's endpoints there, or a linked cluster in it), the
// rest of this cluster, its region, the rest.
func DefaultClientTopology() []string { return []string{HostnameKey, ZoneKey, ClusterKey, RegionKey} }

// LocalityKey expands the short forms zone and region of a locality key; other keys are as given.
func LocalityKey(k string) string {
	switch k {
	case "zone":
		return ZoneKey
	case "region":
		return RegionKey
	}
	return k
}

// ShortKey is the inverse of LocalityKey: zone and region for their keys, any other key as it is.
func ShortKey(k string) string {
	switch k {
	case ZoneKey:
		return "zone"
	case RegionKey:
		return "region"
	}
	return k
}

// DescribeLocality is how explanations and linkerd-global show a locality: its key:value pairs
// sorted by key, keys short (ShortKey), joined by commas; "none" when it has none.
func DescribeLocality(l map[string]string) string {
	if len(l) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, ShortKey(k)+":"+l[k])
	}
	return strings.Join(parts, ",")
}

// TopologyKey is the key a word of `topology` names, and whether it is a locality key (LocalityKey),
// one of the cluster's tiers too; the words hostname and cluster name HostnameKey and ClusterKey.
func TopologyKey(word string) (key string, locality bool) {
	switch word {
	case "hostname":
		return HostnameKey, false
	case "cluster":
		return ClusterKey, false
	}
	return LocalityKey(word), true
}

// The writer's Lease when the Corefile names none (its namespace is then the pod's).
const (
	DefaultLeaseName     = "coredns-global-writer"
	DefaultLeaseDuration = 15 * time.Second
)

// DefaultLinksNamespace is where Linkerd's Links count unless links_namespace says otherwise:
// Linkerd's multicluster namespace, where `linkerd multicluster link` and the multicluster
// extension put Links (linkerd2 multicluster/cmd: --namespace's default).
const DefaultLinksNamespace = "linkerd-multicluster"

// DefaultExplainFrom are the sources that may ask for explanations unless explain_from says
// otherwise: the loopback, where `linkerd global`'s port-forward connects from. The chart renders
// explain_from only when its value differs, so that its default Corefile is one the release
// before (which has no explain_from) accepts as well.
func DefaultExplainFrom() []string { return []string{"127.0.0.0/8", "::1/128"} }

// DefaultForwarders are the Services whose pods forward every client's queries (client_forwarders).
func DefaultForwarders() []string { return []string{"kube-system/kube-dns"} }

// What marks the objects the writer writes.
const (
	Domain = "globaldns.io"
	// LabelWriter names the writer (its Lease, <namespace>.<name>) that owns an object.
	LabelWriter = Domain + "/writer"
	// LabelManagedBy and ManagedBy mark an object as written by this plugin, the Kubernetes way.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "coredns-global"
	// LabelService names the global service an object is written for (on the Service and slices).
	LabelService = Domain + "/global-service"
	// LabelCluster names the member cluster whose endpoints a slice holds.
	LabelCluster = Domain + "/source-cluster"
	// SlicesManagedBy is the writer's value of endpointslice.kubernetes.io/managed-by.
	SlicesManagedBy = "global." + Domain
)

// Defaults of the plugin's own options that the chart renders an option against (only when its
// value differs), as it does the contract's: held to these by TestChartKeepsTheContract.
const (
	DefaultSuffix = "-global" // service_suffix: the written Service of global service <svc> is <svc>-global
	DefaultPolicy = "all"     // policy
)
