package writer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"
)

// newMCSReconciler is newTestReconciler with serviceimports on and the CRD found: its
// ServiceImport informer runs against the fake.
func newMCSReconciler(t *testing.T, imports ...runtime.Object) (*reconciler, *mcsfake.Clientset) {
	t.Helper()
	// mcs-api's generated fake predates streaming lists: it never ends one with a bookmark.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	r, client := newTestReconciler()
	mcs := mcsfake.NewSimpleClientset(imports...)
	r.cfg.ServiceImports, r.mcs = true, mcs
	r.store = newStore(client, mcs, nil, testOwner)
	r.store.importsAvailable.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, f := range r.store.importFactories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), r.store.importsSynced) {
		t.Fatal("ServiceImport informer not synced")
	}
	return r, mcs
}

func TestReconcilerWritesMCSObjects(t *testing.T) {
	r, mcs := newMCSReconciler(t)
	s := westService()
	ctx := context.Background()
	if err := r.sync(ctx, s.Key, s); err != nil {
		t.Fatal(err)
	}
	si, err := mcs.MulticlusterV1alpha1().ServiceImports("db").Get(ctx, "foo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if si.Spec.Type != mcsv1alpha1.Headless || fmt.Sprint(si.Spec.Ports) != "[{db TCP <nil> 5432}]" || si.Labels[LabelWriter] != testOwner {
		t.Errorf("ServiceImport %+v", si)
	}
	es, err := r.client.DiscoveryV1().EndpointSlices("db").Get(ctx, "foo-mcs-west-ipv4-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if es.Labels[mcsv1alpha1.LabelServiceName] != "foo" || es.Labels[mcsv1alpha1.LabelSourceCluster] != "west" ||
		es.Labels[discoveryv1.LabelServiceName] != "" || es.Labels[LabelWriter] != testOwner {
		t.Errorf("labels %v", es.Labels)
	}
	// The MCS names are <host>.<cluster>...: the host as it is.
	if len(es.Endpoints) != 1 || *es.Endpoints[0].Hostname != "foo-0" || es.OwnerReferences[0].Kind != "ServiceImport" {
		t.Errorf("slice %+v", es)
	}
	// The -global objects are there too.
	if _, err := r.client.DiscoveryV1().EndpointSlices("db").Get(ctx, "foo-global-west-ipv4-0", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}

// Another MCS implementation's ServiceImport: reported, left alone, no MCS slice written beside it;
// the -global objects are written all the same.
func TestReconcilerLeavesForeignServiceImportAlone(t *testing.T) {
	foreign := &mcsv1alpha1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo", Labels: map[string]string{"owner": "submariner"}},
		Spec:       mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.ClusterSetIP, IPs: []string{"10.0.0.1"}},
	}
	r, mcs := newMCSReconciler(t, foreign)
	s := westService()
	ctx := context.Background()
	if err := r.sync(ctx, s.Key, s); !errors.Is(err, errConflict) {
		t.Fatalf("sync: %v, want a conflict", err)
	}
	for _, a := range mcs.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" && v != "create" {
			t.Errorf("%s of a ServiceImport", v)
		}
	}
	got, _ := mcs.MulticlusterV1alpha1().ServiceImports("db").Get(ctx, "foo", metav1.GetOptions{})
	if got.Labels["owner"] != "submariner" || got.Spec.Type != mcsv1alpha1.ClusterSetIP {
		t.Errorf("the foreign ServiceImport changed: %+v", got)
	}
	l, _ := r.client.DiscoveryV1().EndpointSlices("db").List(ctx, metav1.ListOptions{})
	var names []string
	for _, es := range l.Items {
		names = append(names, es.Name)
	}
	if fmt.Sprint(names) != "[foo-global-west-ipv4-0]" {
		t.Errorf("slices %v, want the -global one only", names)
	}
	if _, ok := r.conflicts.active[conflictKey{s.Key, blocksMCS}]; !ok {
		t.Errorf("conflicts %v", r.conflicts.active)
	}
	if _, ok := r.conflicts.active[conflictKey{s.Key, blocksGlobal}]; ok {
		t.Errorf("the -global objects are blocked too: %v", r.conflicts.active)
	}
}

// Off (or without the CRD), the MCS slices this writer wrote are deleted.
func TestReconcilerDeletesMCSSlicesWhenOff(t *testing.T) {
	labels := ownLabels("foo", testOwner)
	labels[discoveryv1.LabelManagedBy] = SlicesManagedBy
	labels[mcsv1alpha1.LabelServiceName] = "foo"
	old := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo-mcs-west-ipv4-0", UID: "1", Labels: labels}}
	r, client := newTestReconciler(old)
	s := westService()
	if err := r.sync(context.Background(), s.Key, s); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("db").Get(context.Background(), old.Name, metav1.GetOptions{}); err == nil {
		t.Error("the MCS slice is still there")
	}
	if _, err := client.DiscoveryV1().EndpointSlices("db").Get(context.Background(), "foo-global-west-ipv4-0", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
}

// With serviceimports off and `namespaces`, Roles in those namespaces forbid the cluster-wide list:
// the ServiceImports written are found in each watched namespace, and deleted; a foreign one and
// those elsewhere are left.
func TestSweepImportsInWatchedNamespacesWhenForbiddenElsewhere(t *testing.T) {
	imp := func(ns, name string, labels map[string]string) runtime.Object {
		return &mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	}
	mcs := mcsfake.NewSimpleClientset(imp("db", "foo", ownLabels("foo", testOwner)), imp("db", "bar", map[string]string{"owner": "submariner"}),
		imp("cache", "baz", ownLabels("baz", testOwner)), imp("other", "qux", ownLabels("qux", testOwner)))
	mcs.PrependReactor("list", "serviceimports", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == metav1.NamespaceAll {
			return true, nil, apierrors.NewForbidden(mcsv1alpha1.Resource("serviceimports"), "", errors.New("RBAC: namespaced Roles"))
		}
		return false, nil, nil
	})
	r, _ := newTestReconciler()
	r.mcs, r.namespaces = mcs, []string{"db", "cache"}
	r.sweepImports(context.Background())
	var deleted []string
	for _, a := range mcs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			deleted = append(deleted, d.GetNamespace()+"/"+d.GetName())
		}
	}
	if fmt.Sprint(deleted) != "[db/foo cache/baz]" {
		t.Errorf("deleted %v, want db/foo and cache/baz", deleted)
	}
}
