package writer

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/telemetry"
	"github.com/globaldns/global/test/testkit"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

var testGCOwner = &GCOwner{Resource: "clusterroles.rbac.authorization.k8s.io", Name: "coredns-global-write"}

// TestOwnerKindsAreTheContracts: the writer reads an owner of every resource `owner` takes, and
// of no other.
func TestOwnerKindsAreTheContracts(t *testing.T) {
	if have, want := slices.Sorted(maps.Keys(ownerKinds)), contract.OwnerResources(); !slices.Equal(have, want) {
		t.Errorf("the writer reads owners of %v, the contract takes %v", have, want)
	}
}

func ownerRole(uid types.UID) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: testGCOwner.Name, UID: uid}}
}

func ownerRefsOf(uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: testGCOwner.Name, UID: uid}}
}

// With `owner`, the Service created carries a plain reference to the owner (no controller, no
// blockOwnerDeletion: those need rights on the owner); its slices stay owned by the Service.
func TestOwnerReferencesOnCreate(t *testing.T) {
	r, client := newTestReconciler(ownerRole("u1"))
	r.cfg.GCOwner = testGCOwner
	s := westService()
	ctx := context.Background()
	if err := r.sync(ctx, s.Key, s); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services("db").Get(ctx, "foo-global", metav1.GetOptions{})
	testkit.Must(t, err)
	if !ownersUpToDate(svc.OwnerReferences, ownerRefsOf("u1")) || svc.OwnerReferences[0].Controller != nil || svc.OwnerReferences[0].BlockOwnerDeletion != nil {
		t.Errorf("the Service's owners %+v, want %+v", svc.OwnerReferences, ownerRefsOf("u1"))
	}
	es, err := client.DiscoveryV1().EndpointSlices("db").Get(ctx, "foo-global-west-ipv4-0", metav1.GetOptions{})
	testkit.Must(t, err)
	if len(es.OwnerReferences) != 1 || es.OwnerReferences[0].Kind != "Service" || es.OwnerReferences[0].Name != "foo-global" {
		t.Errorf("the slice's owners %+v, want its Service", es.OwnerReferences)
	}
	if m := testutil.ToFloat64(telemetry.WriterOwnerMissing); m != 0 {
		t.Errorf("owner missing %v", m)
	}
}

// A missing owner writes nothing (no object with a dangling reference), counts as owner_missing,
// says so in the metric, and is looked for again; once it exists, the writes happen.
func TestOwnerMissingWritesNothing(t *testing.T) {
	r, client := newTestReconciler()
	r.cfg.GCOwner = testGCOwner
	s := westService()
	ctx := context.Background()
	err := r.sync(ctx, s.Key, s)
	if !errors.Is(err, errOwnerMissing) {
		t.Fatalf("sync: %v, want the owner missing", err)
	}
	if n := writes(client); n != 0 {
		t.Errorf("%d writes without an owner: %v", n, client.Actions())
	}
	if m := testutil.ToFloat64(telemetry.WriterOwnerMissing); m != 1 {
		t.Errorf("owner missing %v, want 1", m)
	}
	// Within ownerRefresh the owner is not read again, however many syncs.
	gets := len(client.Actions())
	if err := r.sync(ctx, s.Key, s); !errors.Is(err, errOwnerMissing) || len(client.Actions()) != gets {
		t.Errorf("second sync: %v, %d more requests", err, len(client.Actions())-gets)
	}

	_, err = client.RbacV1().ClusterRoles().Create(ctx, ownerRole("u2"), metav1.CreateOptions{})
	testkit.Must(t, err)
	r.owners.fetched = time.Now().Add(-ownerRefresh) // the refresh is due
	if err := r.sync(ctx, s.Key, s); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services("db").Get(ctx, "foo-global", metav1.GetOptions{})
	testkit.Must(t, err)
	if !ownersUpToDate(svc.OwnerReferences, ownerRefsOf("u2")) {
		t.Errorf("the Service's owners %+v", svc.OwnerReferences)
	}
	if m := testutil.ToFloat64(telemetry.WriterOwnerMissing); m != 0 {
		t.Errorf("owner missing %v, want 0", m)
	}
}

// The sync queue retries a global service blocked by a missing owner after ownerRefresh, counted
// apart from errors (the owner's read logs it once).
func TestProcessOwnerMissing(t *testing.T) {
	r, client := newTestReconciler()
	r.cfg.GCOwner = testGCOwner
	k := index.Key{Namespace: "db", Name: "foo"}
	src := indextest.New()
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	src.Add(k, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: ports}},
		indextest.Slice(ports, indextest.Endpoint("foo-0", "10.96.0.1")))
	ix := index.New(indextest.Topology(), src)
	ix.Start()
	ix.Changed(k)
	ix.Publish()
	w := &Writer{cfg: r.cfg, index: ix, store: r.store, rec: r}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[index.Key]())
	defer q.ShutDown()
	missing, failed := testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("owner_missing")), testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("error"))
	q.Add(k)
	w.process(context.Background(), q)
	if d := testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("owner_missing")) - missing; d != 1 {
		t.Errorf("owner_missing syncs +%v, want +1", d)
	}
	if d := testutil.ToFloat64(telemetry.WriterSyncs.WithLabelValues("error")) - failed; d != 0 {
		t.Errorf("error syncs +%v, want none", d)
	}
	// Not rate-limited (no backoff growing per failure): added again after ownerRefresh.
	if q.NumRequeues(k) != 0 || q.Len() != 0 {
		t.Errorf("requeues %d, queued %d: want none now, one after %v", q.NumRequeues(k), q.Len(), ownerRefresh)
	}
	if n := writes(client); n != 0 {
		t.Errorf("%d writes", n)
	}
}

// A recreated owner (a new UID) is written onto our Service and ServiceImport; without `owner`, a
// Service's references are left as they are.
func TestOwnerReferencesFollowTheOwner(t *testing.T) {
	old := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo-global", UID: "s1",
		Labels: ownLabels("foo", testOwner), OwnerReferences: ownerRefsOf("old")}}
	s := westService()
	ctx := context.Background()
	for _, owner := range []*GCOwner{testGCOwner, nil} {
		r, client := newTestReconciler(old.DeepCopy(), ownerRole("new"))
		r.cfg.GCOwner = owner
		r.store.scopes[""].services.GetStore().Add(old.DeepCopy())
		if err := r.sync(ctx, s.Key, s); err != nil {
			t.Fatal(err)
		}
		svc, err := client.CoreV1().Services("db").Get(ctx, "foo-global", metav1.GetOptions{})
		testkit.Must(t, err)
		want := ownerRefsOf("new")
		if owner == nil {
			want = ownerRefsOf("old")
		}
		if !ownersUpToDate(svc.OwnerReferences, want) {
			t.Errorf("owner %v: the Service's owners %+v, want %+v", owner, svc.OwnerReferences, want)
		}
	}

	r, mcs := newMCSReconciler(t)
	_, err := r.client.RbacV1().ClusterRoles().Create(ctx, ownerRole("u3"), metav1.CreateOptions{})
	testkit.Must(t, err)
	r.cfg.GCOwner = testGCOwner
	if err := r.sync(ctx, s.Key, s); err != nil {
		t.Fatal(err)
	}
	si, err := mcs.MulticlusterV1alpha1().ServiceImports("db").Get(ctx, "foo", metav1.GetOptions{})
	testkit.Must(t, err)
	if !ownersUpToDate(si.OwnerReferences, ownerRefsOf("u3")) {
		t.Errorf("the ServiceImport's owners %+v", si.OwnerReferences)
	}
}
