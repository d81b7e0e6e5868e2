package writer

import (
	"context"
	"errors"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
)

// The client-go fake stands in for the API here, with the store fed by hand: enough for the
// reconciler's decisions. The real API server proves the writes (test/integration).
func newTestReconciler(objs ...runtime.Object) (*reconciler, *fake.Clientset) {
	client := fake.NewClientset(objs...)
	st := newStore(client, nil)
	for _, o := range objs {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok && owned(es.Labels) {
			st.scopes[""].slices.GetStore().Add(es)
		}
	}
	return &reconciler{
		cfg:    Config{Suffix: DefaultSuffix, MaxEndpoints: DefaultMaxEndpoints, Topology: indextest.Topology()},
		client: client, store: st, tracker: newTracker(), conflicts: &conflicts{active: map[index.Key]string{}},
	}, client
}

func westService() *index.Service {
	src := indextest.New()
	k := index.Key{Namespace: "db", Name: "foo"}
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	src.Add(k, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: ports}},
		indextest.Slice(ports, indextest.Endpoint("foo-0", "10.96.0.1")))
	return indextest.Topology().Build(k, src)
}

func writes(client *fake.Clientset) (n int) {
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			n++
		}
	}
	return n
}

func TestReconcilerLeavesForeignSliceAlone(t *testing.T) {
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "db", Name: "foo-global-west-ipv4-0", Labels: map[string]string{"owner": "someone"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	r, client := newTestReconciler(foreign)
	s := westService()
	err := r.sync(context.Background(), s.Key, s)
	if !errors.Is(err, errConflict) {
		t.Fatalf("sync: %v, want a conflict", err)
	}
	got, _ := client.DiscoveryV1().EndpointSlices("db").Get(context.Background(), foreign.Name, metav1.GetOptions{})
	if got.Labels["owner"] != "someone" || len(got.Endpoints) != 0 {
		t.Errorf("the foreign slice changed: %+v", got)
	}
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "endpointslices" && a.GetVerb() != "create" && a.GetVerb() != "get" {
			t.Errorf("%s of a slice: %v", a.GetVerb(), a)
		}
	}
	if len(r.conflicts.active) != 1 {
		t.Errorf("conflicts %v", r.conflicts.active)
	}
}

func TestReconcilerCreateThenNothing(t *testing.T) {
	r, client := newTestReconciler()
	s := westService()
	if err := r.sync(context.Background(), s.Key, s); err != nil {
		t.Fatal(err)
	}
	if n := writes(client); n != 2 {
		t.Fatalf("%d writes, want 2 (Service, slice): %v", n, client.Actions())
	}
	// Until the informer shows the created slice, the cache is stale: no second create.
	if err := r.sync(context.Background(), s.Key, s); !errors.Is(err, errStale) {
		t.Fatalf("second sync before the echo: %v, want stale", err)
	}
	// Feed the store what the API holds (the informer would): then nothing is left to write.
	sc := r.store.scopes[""]
	svc, _ := client.CoreV1().Services("db").Get(context.Background(), "foo-global", metav1.GetOptions{})
	sc.services.GetStore().Add(svc)
	es, _ := client.DiscoveryV1().EndpointSlices("db").Get(context.Background(), "foo-global-west-ipv4-0", metav1.GetOptions{})
	sc.slices.GetStore().Add(es)
	r.tracker.observe(es, false)
	before := writes(client)
	if err := r.sync(context.Background(), s.Key, s); err != nil {
		t.Fatal(err)
	}
	if n := writes(client) - before; n != 0 {
		t.Errorf("%d writes with nothing changed: %v", n, client.Actions()[before:])
	}

	// The global service goes: both objects are deleted, with preconditions.
	before = writes(client)
	if err := r.sync(context.Background(), s.Key, nil); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions()[before:] {
		if a.GetVerb() == "get" {
			continue
		}
		d, ok := a.(k8stesting.DeleteAction)
		if !ok || d.GetDeleteOptions().Preconditions == nil || d.GetDeleteOptions().Preconditions.UID == nil {
			t.Errorf("%v: want deletes with UID preconditions", a)
		}
	}
	if n := writes(client) - before; n != 2 {
		t.Errorf("%d deletes, want 2", n)
	}
}

// A 409 Conflict on update is a stale cache, not an error: counted as stale, requeued, not warned.
func TestProcessTreatsAPIConflictAsStale(t *testing.T) {
	r, client := newTestReconciler()
	s := westService()
	ctx := context.Background()
	if err := r.sync(ctx, s.Key, s); err != nil {
		t.Fatal(err)
	}
	sc := r.store.scopes[""]
	svc, _ := client.CoreV1().Services("db").Get(ctx, "foo-global", metav1.GetOptions{})
	sc.services.GetStore().Add(svc)
	es, _ := client.DiscoveryV1().EndpointSlices("db").Get(ctx, "foo-global-west-ipv4-0", metav1.GetOptions{})
	sc.slices.GetStore().Add(es)
	r.tracker.observe(es, false)

	// foo-0 turns not ready, and someone else updated the slice meanwhile.
	src := indextest.New()
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	src.Add(s.Key, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: ports}},
		indextest.Slice(ports, indextest.NotReady(indextest.Endpoint("foo-0", "10.96.0.1"))))
	ix := index.New(indextest.Topology(), src)
	ix.Start()
	ix.Changed(s.Key)
	ix.Publish()
	client.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(discoveryv1.Resource("endpointslices"), es.Name, errors.New("the object has been modified"))
	})
	w := &Writer{cfg: r.cfg, index: ix, store: r.store, rec: r}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[index.Key]())
	defer q.ShutDown()
	stale, failed := testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("stale")), testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("error"))
	q.Add(s.Key)
	w.process(ctx, q)
	if d := testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("stale")) - stale; d != 1 {
		t.Errorf("stale syncs +%v, want +1", d)
	}
	if d := testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("error")) - failed; d != 0 {
		t.Errorf("error syncs +%v, want none", d)
	}
	if q.NumRequeues(s.Key) != 1 {
		t.Errorf("requeues %d, want 1", q.NumRequeues(s.Key))
	}
}
