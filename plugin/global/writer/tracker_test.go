package writer

import (
	"fmt"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func slice(name string, gen int64) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Generation: gen, ResourceVersion: fmt.Sprint(100 + gen)}}
}

func TestTracker(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker()
	tr.now = func() time.Time { return now }
	a1, a2 := slice("foo-global-west-ipv4-0", 1), slice("foo-global-west-ipv4-0", 2)

	if tr.stale("db", "foo-global", nil) {
		t.Fatal("stale with nothing written")
	}
	tr.wrote(a1)
	if !tr.stale("db", "foo-global", nil) {
		t.Error("a created slice missing from the cache is not stale")
	}
	if tr.stale("db", "bar-global", nil) {
		t.Error("another service is stale")
	}
	if !tr.observe(a1, false) {
		t.Error("the echo of our create is not ours")
	}
	if tr.stale("db", "foo-global", []*discoveryv1.EndpointSlice{a1}) {
		t.Error("stale after the echo")
	}
	theirs := a1.DeepCopy()
	theirs.ResourceVersion = "150" // someone else's edit: labels, not a new generation
	if tr.observe(theirs, false) || tr.observe(a1, false) {
		t.Error("an event after the echo is ours")
	}

	tr.wrote(a2)
	if !tr.stale("db", "foo-global", []*discoveryv1.EndpointSlice{a1}) {
		t.Error("a cache at generation 1 after writing 2 is not stale")
	}
	if tr.observe(a1, false) {
		t.Error("an older event is the echo of our update")
	}
	if !tr.observe(a2, false) {
		t.Error("the echo of our update is not ours")
	}
	tr.deleted(a2)
	if !tr.stale("db", "foo-global", []*discoveryv1.EndpointSlice{a2}) {
		t.Error("a deleted slice still cached is not stale")
	}
	if tr.observe(cache.DeletedFinalStateUnknown{Key: "db/foo-global-west-ipv4-0", Obj: a2}, false) {
		t.Error("a tombstone is the echo of our deletion: what happened in between is unknown")
	}
	if tr.stale("db", "foo-global", nil) {
		t.Error("stale after the deletion's echo")
	}
	tr.deleted(a2)
	if !tr.observe(a2, true) {
		t.Error("the echo of our deletion is not ours")
	}

	// An echo that never comes does not block the service forever.
	tr.wrote(slice("foo-global-north-ipv4-0", 1))
	now = now.Add(echoTimeout + time.Second)
	if tr.stale("db", "foo-global", nil) {
		t.Error("still stale after the echo timeout")
	}
}
