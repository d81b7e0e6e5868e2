package writer

import (
	"fmt"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
)

// A term's queue takes namespaces in turn: another namespace's service added behind a thousand of
// one namespace is taken second, not last; each namespace's in the order they came; a key added
// again while waiting keeps its place.
func TestTermQueueIsFair(t *testing.T) {
	q := newTermQueue()
	defer q.ShutDown()
	for i := range 1000 {
		q.Add(index.Key{Namespace: "burst", Name: fmt.Sprint("s", i)})
	}
	q.Add(index.Key{Namespace: "other", Name: "one"})
	q.Add(index.Key{Namespace: "burst", Name: "s0"})
	q.Add(index.Key{Namespace: "third", Name: "one"})
	var got []string
	for range 6 {
		k, _ := q.Get()
		got = append(got, k.String())
		q.Done(k)
	}
	want := []string{"burst/s0", "other/one", "third/one", "burst/s1", "burst/s2", "burst/s3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("taken %v, want %v", got, want)
	}
	if n := q.Len(); n != 996 {
		t.Errorf("%d waiting, want 996", n)
	}
}
