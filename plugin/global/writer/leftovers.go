package writer

import (
	"context"

	"github.com/globaldns/global/plugin/global/telemetry"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Leftovers logs a warning, once, when Services that owner wrote are in the namespaces (all when
// none): with `endpointslices off` nothing updates or deletes them, so their slices keep the
// endpoints of the moment writing stopped. They are not deleted: no lease is taken, and a replica
// that still writes (a rolling change of the setting) would be fought. Only the Services are
// looked for (one label-selected list of at most one object per namespace, which the read RBAC
// allows); their slices go with them.
func Leftovers(ctx context.Context, client kubernetes.Interface, namespaces []string, owner string) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		l, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: ServiceSelector(owner), Limit: 1})
		if err != nil {
			if ctx.Err() == nil {
				telemetry.Log.Debugf("writer: looking for objects written earlier: %v", err)
			}
			return
		}
		if len(l.Items) > 0 {
			telemetry.Log.Warningf("endpointslices off: the Services and EndpointSlices this writer wrote earlier (%s=%s, e.g. %s/%s) "+
				"are left as they were, with the endpoints of the moment writing stopped; delete them with: "+
				"kubectl delete services,endpointslices --all-namespaces -l %s=%s,%s=%s",
				LabelWriter, owner, l.Items[0].Namespace, l.Items[0].Name, LabelManagedBy, ManagedBy, LabelWriter, owner)
			return
		}
	}
}
