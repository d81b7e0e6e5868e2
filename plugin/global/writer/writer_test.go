package writer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// Overlapping terms, as client-go's LeaderElector makes them when it re-acquires a Lease that
// still names this replica before the last term has returned: the last term's end must not take
// the next term's work queue with it.
func TestTermsDoNotOverlap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ix := index.New(indextest.Topology(), indextest.New())
	ix.Start()
	ix.Publish()
	w := New(newFakeClient(), nil, ix, nil, Config{Suffix: DefaultSuffix, MaxEndpoints: DefaultMaxEndpoints})
	w.Start(ctx)

	first, endFirst := context.WithCancel(ctx)
	firstDone := make(chan struct{})
	go func() { w.Run(first); close(firstDone) }()
	q1 := waitQueue(t, w, nil)

	second, endSecond := context.WithCancel(ctx)
	defer endSecond()
	secondDone := make(chan struct{})
	go func() { w.Run(second); close(secondDone) }()
	endFirst()
	<-firstDone
	q2 := waitQueue(t, w, q1)
	if w.queue.Load() != q2 {
		t.Fatal("the second term's queue was replaced")
	}
	endSecond()
	<-secondDone
	if q := w.queue.Load(); q != nil {
		t.Errorf("a queue is left after the last term: %v", q)
	}
}

// waitQueue waits until a term's queue, other than not, is in place, and returns it.
func waitQueue(t *testing.T, w *Writer, not any) any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if q := w.queue.Load(); q != nil && any(q) != not {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatal("no term's queue in place")
		}
		time.Sleep(time.Millisecond)
	}
}

// sweepOutside deletes this writer's objects outside the watched namespaces, and nothing else.
// (The fake ignores the field selector that narrows the list on a real API server.)
func TestSweepDeletesOnlyOursOutsideTheNamespaces(t *testing.T) {
	meta := func(ns, name, owner string) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "theirs"}}
		if owner != "" {
			m.Labels = ownLabels("foo", owner)
			m.Labels[discoveryv1.LabelManagedBy] = SlicesManagedBy
		}
		return m
	}
	var objs []runtime.Object
	for _, o := range []struct{ ns, owner string }{{"kept", testOwner}, {"dropped", testOwner}, {"dropped", "other.writer"}, {"dropped", ""}} {
		name := "foo-global-" + o.owner
		objs = append(objs, &corev1.Service{ObjectMeta: meta(o.ns, name, o.owner)},
			&discoveryv1.EndpointSlice{ObjectMeta: meta(o.ns, name+"-west-ipv4-0", o.owner)})
	}
	client := newFakeClient(objs...)
	ix := index.New(indextest.Topology(), indextest.New())
	w := New(client, nil, ix, []string{"kept"}, Config{Suffix: DefaultSuffix, Owner: testOwner})
	w.rec.sweepOutside(context.Background())
	var deleted []string
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			deleted = append(deleted, d.GetNamespace()+"/"+d.GetName())
		}
	}
	want := []string{"dropped/foo-global-" + testOwner + "-west-ipv4-0", "dropped/foo-global-" + testOwner}
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
}
