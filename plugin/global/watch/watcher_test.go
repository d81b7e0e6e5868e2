package watch

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The Watcher itself is tested against the real API server, whose watches honour label selectors
// (client-go's fake ignores them): test/integration/watcher_test.go.

func mirrorSlice(name, service, addr string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: service, LabelMirroredService: "true", LabelClusterName: "west"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](15432)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Hostname: ptr.To("foo-0")}},
	}
}
