package index

import (
	"slices"
	"strings"
)

// Mesh-aware clients read more of a service than its endpoints. Linkerd's destination service, given
// an EndpointSlice endpoint without a Pod targetRef (a mirror's: the address of a per-pod mirror,
// behind the linked cluster's gateway), takes from the slice's annotations the authority to send and
// the gateway's mTLS identity (linkerd2 controller/api/destination/watcher/port_publisher.go,
// endpointSliceToAddresses); by a Service's name it reads the Service's opaque ports
// (watcher/opaque_ports_watcher.go, getServiceOpaquePortsAnnotation). Linkerd's service mirror
// annotates its mirrors' Endpoints so (multicluster/service-mirror cluster_watcher_headless.go,
// createHeadlessMirrorEndpoints) and kube-controller-manager's EndpointSliceMirroring copies
// them onto their slices; the watcher keeps these keys of the members' objects, and the writer
// puts them on what it writes for the member's cluster.
const (
	AnnotationRemoteFQName    = "mirror.linkerd.io/remote-svc-fq-name"
	AnnotationGatewayIdentity = "mirror.linkerd.io/remote-gateway-identity"
	AnnotationOpaquePorts     = "config.linkerd.io/opaque-ports"
)

// SliceAnnotationKeys are kept from a mirror's EndpointSlices; ServiceAnnotationKeys from a
// member's Service.
var (
	SliceAnnotationKeys   = []string{AnnotationGatewayIdentity, AnnotationRemoteFQName}
	ServiceAnnotationKeys = []string{AnnotationOpaquePorts}
)

// Annotation is one annotation kept.
type Annotation struct{ Key, Value string }

// Annotations are the annotations of an object that are kept, sorted by key; nil for none.
type Annotations []Annotation

// KeepAnnotations returns the annotations of all whose keys are in keys, sorted.
func KeepAnnotations(all map[string]string, keys []string) Annotations {
	var out Annotations
	for _, k := range keys {
		if v, ok := all[k]; ok {
			out = append(out, Annotation{k, v})
		}
	}
	slices.SortFunc(out, func(a, b Annotation) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Get returns the value of key, and whether it is there.
func (as Annotations) Get(key string) (string, bool) {
	for _, a := range as {
		if a.Key == key {
			return a.Value, true
		}
	}
	return "", false
}

// sliceAnnotations returns, for each of members with annotated slices, its cluster and the first
// of its slices' annotations (a member's slices are copies of one object's: they differ only
// while kube-controller-manager rewrites them one by one).
func (t *Topology) sliceAnnotations(members []*Member, slicesOf [][]*Slice) []clusterAnnotations {
	var out []clusterAnnotations
	for i, m := range members {
		for _, sl := range slicesOf[i] {
			if sl.Annotations != nil {
				out = append(out, clusterAnnotations{t.ClusterOf(m), sl.Annotations})
				break
			}
		}
	}
	return out
}

// clusterAnnotations are the annotations of one member cluster's slices.
type clusterAnnotations struct {
	cluster     string
	annotations Annotations
}

// SliceAnnotations returns what the slices of cluster's member are annotated with (of
// SliceAnnotationKeys): what the slices written for that cluster carry.
func (s *Service) SliceAnnotations(cluster string) Annotations {
	for _, c := range s.annotated {
		if c.cluster == cluster {
			return c.annotations
		}
	}
	return nil
}

// ServiceAnnotations returns the annotations (of ServiceAnnotationKeys) of the Service of the
// first member: the local one when there is one, whose owner configures it; else the first
// mirror's, which Linkerd copies from the remote Service.
func (s *Service) ServiceAnnotations() Annotations {
	if s == nil || len(s.Members) == 0 {
		return nil
	}
	return s.Members[0].Annotations
}

// SameAnnotations reports whether a and b, two versions of one service, have the same slice
// annotations.
func SameAnnotations(a, b *Service) bool {
	return slices.EqualFunc(a.annotated, b.annotated, func(x, y clusterAnnotations) bool {
		return x.cluster == y.cluster && slices.Equal(x.annotations, y.annotations)
	})
}
