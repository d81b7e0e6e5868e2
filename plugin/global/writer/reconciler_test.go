package writer

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
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
const testOwner = "kube-system.coredns-global-writer"

// newFakeClient is client-go's fake without field management: the writer applies nothing, and
// the field-managed tracker of fake.NewClientset builds a REST mapper of the whole scheme on every
// write, 40 % of this package's CPU (TestPlanMatchesWholeSync: 225 s alone, 558 s beside the
// integration suite).
func newFakeClient(objs ...runtime.Object) *fake.Clientset {
	return fake.NewSimpleClientset(objs...) //nolint:staticcheck // SA1019: no apply to test, see above
}

func newTestReconciler(objs ...runtime.Object) (*reconciler, *fake.Clientset) {
	client := newFakeClient(objs...)
	// The API gives every write a new resourceVersion; client-go's fake keeps the object's.
	var version atomic.Int64
	client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if m, ok := written(a).(metav1.Object); ok {
			m.SetResourceVersion(strconv.FormatInt(version.Add(1), 10))
		}
		return false, nil, nil
	})
	st := newStore(client, nil, nil, testOwner)
	// The store holds what its label selectors would let in.
	for _, o := range objs {
		m, _ := o.(metav1.Object)
		if m == nil || m.GetLabels()[LabelManagedBy] != ManagedBy || m.GetLabels()[LabelWriter] != testOwner {
			continue
		}
		switch o.(type) {
		case *discoveryv1.EndpointSlice:
			st.scopes[""].slices.GetStore().Add(o)
		case *corev1.Service:
			st.scopes[""].services.GetStore().Add(o)
		}
	}
	return &reconciler{
		cfg:    Config{Suffix: DefaultSuffix, MaxEndpoints: DefaultMaxEndpoints, Owner: testOwner},
		client: client, store: st, tracker: newTracker(), conflicts: newConflicts(),
	}, client
}

// written is the object a create or update writes (nil for other actions).
func written(a k8stesting.Action) runtime.Object {
	switch a := a.(type) {
	case k8stesting.CreateAction:
		return a.GetObject()
	case k8stesting.UpdateAction:
		return a.GetObject()
	}
	return nil
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

// A 409 Conflict on update, or a 404 (someone deleted the slice, the namespace controller among
// them), is a stale cache, not an error: counted as stale, requeued, not warned.
func TestProcessTreatsAPIConflictAsStale(t *testing.T) {
	for name, answer := range map[string]func(name string) error{
		"conflict": func(name string) error {
			return apierrors.NewConflict(discoveryv1.Resource("endpointslices"), name, errors.New("the object has been modified"))
		},
		"not found": func(name string) error { return apierrors.NewNotFound(discoveryv1.Resource("endpointslices"), name) },
	} {
		t.Run(name, func(t *testing.T) { testStaleUpdate(t, answer) })
	}
}

func testStaleUpdate(t *testing.T, answer func(name string) error) {
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

	// foo-0 turns not ready, and someone else updated or deleted the slice meanwhile.
	src := indextest.New()
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	src.Add(s.Key, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: ports}},
		indextest.Slice(ports, indextest.NotReady(indextest.Endpoint("foo-0", "10.96.0.1"))))
	ix := index.New(indextest.Topology(), src)
	ix.Start()
	ix.Changed(s.Key)
	ix.Publish()
	client.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, answer(es.Name)
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

// Objects this writer wrote under another service_suffix are found by their labels and deleted
// once the current ones are written; another writer's object at one of our names is a conflict,
// left alone.
func TestReconcilerOwnership(t *testing.T) {
	labels := func(owner string) map[string]string {
		l := ownLabels("foo", owner)
		l[discoveryv1.LabelManagedBy] = SlicesManagedBy
		l[discoveryv1.LabelServiceName] = "foo-old"
		return l
	}
	oldService := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo-old", UID: "1", Labels: ownLabels("foo", testOwner)}}
	oldSlice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo-old-west-ipv4-0", UID: "2", Labels: labels(testOwner)}}
	theirs := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo-old-west-ipv4-1", UID: "3", Labels: labels("other.writer")}}
	r, client := newTestReconciler(oldService, oldSlice, theirs)
	s := westService()
	if err := r.sync(context.Background(), s.Key, s); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case k8stesting.CreateAction:
			got = append(got, "create "+a.GetObject().(metav1.Object).GetName())
		case k8stesting.DeleteAction:
			got = append(got, "delete "+a.GetName())
		}
	}
	want := []string{"create foo-global", "create foo-global-west-ipv4-0", "delete foo-old-west-ipv4-0", "delete foo-old"}
	if !slices.Equal(got, want) {
		t.Errorf("writes %v, want %v", got, want)
	}

	// Another writer's Service at our name.
	theirService := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo-global", Labels: ownLabels("foo", "other.writer")}}
	r, client = newTestReconciler(theirService)
	if err := r.sync(context.Background(), s.Key, s); !errors.Is(err, errConflict) {
		t.Fatalf("sync: %v, want a conflict", err)
	}
	if n := writes(client); n != 1 { // the refused create
		t.Errorf("%d writes, want the one refused create: %v", n, client.Actions())
	}
	if c := r.conflicts.active[conflictKey{s.Key, blocksGlobal}]; !strings.Contains(c, "belongs to another writer") {
		t.Errorf("conflict %q", c)
	}
}
