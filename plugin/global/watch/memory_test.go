package watch

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// BenchmarkScale is the watcher's and the index's own start-up work and their steady-state heap
// per record, for the scale bench's shape (test/bench/scale.go) without an API server, at 1,000,
// 10,000 and 100,000 global services: per global service a local Service and 3 mirrors, 3
// endpoints each, and a per-pod mirror (Service and slice) per mirror record. The objects are
// made first; what is timed is what the plugin does with a reflector's initial lists (every
// reflector store's Replace) until the index is published. make bench measures the same on the
// real control plane, at the sizes the API server loads in reasonable time.
//
// live-B/record is the live heap after a full GC: what the store holds, the same in every run.
// inuse-B/record adds the free slots of the spans they occupy, which depend on when the GC ran
// while the garbage of the conversion (the API objects) was interleaved with what is kept: for
// the same live heap, about 440 B at GOGC=10, 500 at the default 100, 570 at 400.
func BenchmarkScale(b *testing.B) {
	for _, services := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				client := fake.NewClientset() // outside the measure: never used, its tables are not the watcher's
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				w, err := New(client, []string{"scale"}, DefaultExportSelector) // never run
				if err != nil {
					b.Fatal(err)
				}
				ix := index.New(&index.Topology{Local: "east"}, w)
				w.objects.setSink(ix)
				lists := scaleObjects(services)
				b.StartTimer()
				for _, t := range w.stores {
					if err := t.Replace(lists[[2]int{int(t.kind), int(t.src)}], "1"); err != nil {
						b.Fatal(err)
					}
				}
				ix.Start()
				ix.Publish()
				b.StopTimer()
				lists = nil
				runtime.GC()
				runtime.ReadMemStats(&after)
				records := services * len(scaleClusters) * scaleEndpoints
				if n := ix.Snapshot().Len(); n != services {
					b.Fatalf("%d global services", n)
				}
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(records), "live-B/record")
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(records), "inuse-B/record")
				runtime.KeepAlive(w)
				runtime.KeepAlive(ix)
				runtime.KeepAlive(client)
				b.StartTimer()
			}
		})
	}
}

var scaleClusters = []string{"", "west", "north", "south"} // "": the local Service

const scaleEndpoints = 3

// scaleObjects returns the API objects of n global services, by reflector (kind, feed) as the
// reflectors list them.
func scaleObjects(services int) map[[2]int][]any {
	lists := map[[2]int][]any{}
	add := func(k kind, src feed, obj any) {
		lists[[2]int{int(k), int(src)}] = append(lists[[2]int{int(k), int(src)}], obj)
	}
	for i := range services {
		global := fmt.Sprintf("s%d", i)
		for ci, cluster := range scaleClusters {
			name, labels, src := global, map[string]string{"mirror.linkerd.io/exported": "true"}, fromLocal
			var ann, sliceAnn map[string]string
			if cluster != "" {
				name, src = global+"-"+cluster, fromMirror
				labels = map[string]string{LabelMirroredService: "true", LabelClusterName: cluster}
				ann = map[string]string{AnnotationRemoteFQName: global + ".scale.svc.cluster.local"}
				// What the service mirror writes on the mirror's Endpoints, and kube-controller-manager
				// copies onto its slices.
				sliceAnn = map[string]string{AnnotationRemoteFQName: global + ".scale.svc.cluster.local",
					index.AnnotationGatewayIdentity: "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local"}
			}
			add(kindService, src, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: name, Labels: labels, Annotations: ann, ResourceVersion: fmt.Sprint(i*100 + ci)},
				Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
			})
			es := &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: "scale", Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}, Annotations: sliceAnn, ResourceVersion: "1"},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
			}
			for e := range scaleEndpoints {
				addr := fmt.Sprintf("10.%d.%d.%d", 96+ci*scaleEndpoints+e, i/256%256, i%256)
				if i >= 65536 { // past 65,536 services the third octet repeats: a fourth byte of IPv4 space
					addr = fmt.Sprintf("11.%d.%d.%d", 96+ci*scaleEndpoints+e, i/256%256, i%256)
				}
				ep := discoveryv1.Endpoint{Addresses: []string{addr}, Hostname: ptr.To(fmt.Sprintf("%s-%d", global, e)), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
				if cluster == "" {
					// Spread over 3 zones and 300 nodes, as a big cluster's pods are.
					n := (i*scaleEndpoints + e) % 300
					ep.Zone, ep.NodeName = ptr.To(fmt.Sprintf("zone-%c", 'a'+n%3)), ptr.To(fmt.Sprintf("node-%d", n))
					ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: *ep.Hostname}
				} else {
					pod := fmt.Sprintf("%s-%d-%s", global, e, cluster)
					pl := map[string]string{LabelMirroredService: "true", LabelClusterName: cluster, LabelHeadlessMirror: name}
					add(kindService, fromMirror, &corev1.Service{
						ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: pod, Labels: pl, ResourceVersion: "1"},
						Spec:       corev1.ServiceSpec{ClusterIP: addr, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
					})
					sl := map[string]string{discoveryv1.LabelServiceName: pod, LabelHeadlessMirror: name}
					add(kindSlice, fromPodMirror, &discoveryv1.EndpointSlice{
						ObjectMeta:  metav1.ObjectMeta{Namespace: "scale", Name: pod + "-x", Labels: sl, ResourceVersion: "1"},
						AddressType: discoveryv1.AddressTypeIPv4,
						Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"172.31.255.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
					})
				}
				es.Endpoints = append(es.Endpoints, ep)
			}
			add(kindSlice, src, es)
		}
	}
	return lists
}
