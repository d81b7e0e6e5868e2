package writer

import (
	"github.com/globaldns/global/plugin/global/index"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The written objects carry, from the members' objects, what mesh-aware clients read besides the
// endpoints (index/mesh.go): the -global Service its first member's Service annotations, and each
// linked cluster's slices that cluster's mirror's slice annotations, so that Linkerd's destination
// service gives their endpoints the gateway identity, protocol hint and authority it gives its own
// mirrors'. Not Linkerd's cluster-name label: the destination takes the metric labels of a whole
// answer from whichever slice of the Service it read last (port_publisher.go addEndpointSlice,
// metricLabels), so on some slices of one Service it would tag every address, local pods included,
// with one linked cluster's name. The writer owns those annotations on its objects, setting and
// removing them as the members change; other annotations of its objects it leaves as they are.

// annotationsUpToDate reports whether have and want agree on every key of keys.
func annotationsUpToDate(have, want map[string]string, keys []string) bool {
	for _, k := range keys {
		h, hok := have[k]
		w, wok := want[k]
		if hok != wok || h != w {
			return false
		}
	}
	return true
}

// setAnnotations makes m's annotations of keys want's.
func setAnnotations(m *metav1.ObjectMeta, want map[string]string, keys []string) {
	for _, k := range keys {
		v, ok := want[k]
		switch {
		case !ok:
			delete(m.Annotations, k)
		case m.Annotations == nil:
			m.Annotations = map[string]string{k: v}
		default:
			m.Annotations[k] = v
		}
	}
}

// meshFunc gives the annotations of a member cluster's slices for mesh-aware clients.
type meshFunc func(cluster string) map[string]string

// meshOf returns what the slices of a member cluster of s carry for mesh-aware clients: for a
// linked cluster, its mirror's slice annotations; nothing for this cluster's own, whose endpoints
// name their pods.
func meshOf(s *index.Service, local string) meshFunc {
	return func(cluster string) map[string]string {
		if cluster == local {
			return nil
		}
		return s.SliceAnnotations(cluster)
	}
}
