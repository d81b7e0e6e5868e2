package writer

import (
	"context"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	"k8s.io/client-go/kubernetes/fake"
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
	w := New(fake.NewClientset(), ix, nil, Config{Suffix: DefaultSuffix, MaxEndpoints: DefaultMaxEndpoints, Topology: indextest.Topology()})
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
