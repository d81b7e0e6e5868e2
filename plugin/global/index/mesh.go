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

// KeepAnnotations returns the annotations of all whose keys are in keys, sorted.
func KeepAnnotations(all map[string]string, keys []string) Annotations {
	var out Annotations
	for _, k := range keys {
		if v, ok := all[k]; ok {
			out = append(out, Annotation{Key: k, Value: v})
		}
	}
	slices.SortFunc(out, func(a, b Annotation) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Get returns the value of key as kept, and whether it is there.
func (as Annotations) Get(key string) (string, bool) {
	for _, a := range as {
		if a.Key == key {
			return a.Value, true
		}
	}
	return "", false
}

// Map returns as as an object's annotations for global service k (Relative values made whole);
// nil for none.
func (as Annotations) Map(k Key) map[string]string {
	if len(as) == 0 {
		return nil
	}
	out := make(map[string]string, len(as))
	for _, a := range as {
		out[a.Key] = a.Value
		if a.Relative {
			out[a.Key] = k.Name + "." + k.Namespace + "." + a.Value
		}
	}
	return out
}

// annotate keeps, for each member, the annotations of the first of its slices that has some (a
// member's slices are copies of one object's: they differ only while kube-controller-manager
// rewrites them one by one).
func (s *Service) annotate(slicesOf [][]*Slice) {
	for i := range s.clusters {
		s.clusters[i].annotations = nil // relocate copied the previous build's
		for _, sl := range slicesOf[i] {
			if sl.Annotations != nil {
				s.clusters[i].annotations = sl.Annotations
				break
			}
		}
	}
}

// SliceAnnotations returns what the slices written for cluster carry: the annotations (of
// SliceAnnotationKeys) of the slices of cluster's member; nil for none.
func (s *Service) SliceAnnotations(cluster string) map[string]string {
	if c := s.cluster(cluster); c != nil && c.annotations != nil {
		return c.annotations.Map(s.Key)
	}
	return nil
}

// ServiceAnnotations returns what the written Service carries: the annotations (of
// ServiceAnnotationKeys) of the Service of the first member: the local one when there is one,
// whose owner configures it; else the first mirror's, which Linkerd copies from the remote
// Service. nil for none.
func (s *Service) ServiceAnnotations() map[string]string {
	if s == nil || len(s.Members) == 0 || s.Members[0].Settings == nil {
		return nil
	}
	return s.Members[0].Settings.Annotations.Map(s.Key)
}

// SameAnnotations reports whether a and b, two versions of one service with the same members, have
// the same slice annotations.
func SameAnnotations(a, b *Service) bool {
	return slices.EqualFunc(a.clusters, b.clusters, func(p, q clusterRun) bool {
		return p.annotations == q.annotations || p.annotations != nil && q.annotations != nil && slices.Equal(*p.annotations, *q.annotations)
	})
}
