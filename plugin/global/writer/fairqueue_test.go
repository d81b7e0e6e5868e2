package writer

import (
	"fmt"
	"testing"
	"time"

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

// A key's retries delay that key alone: a tenant whose 300 services all fail a write at once does
// not delay another's retry. client-go's default controller rate limiter also holds every retry
// of every key to one bucket of 10 a second (burst 100): the other's retry would wait behind
// the 200 beyond the burst, 20 s.
func TestTermQueueRetriesArePerKey(t *testing.T) {
	q := newTermQueue()
	defer q.ShutDown()
	for i := range 300 {
		q.AddRateLimited(index.Key{Namespace: "noisy", Name: fmt.Sprint("s", i)})
	}
	other := index.Key{Namespace: "db", Name: "foo"}
	start := time.Now()
	q.AddRateLimited(other)
	for {
		k, _ := q.Get()
		q.Done(k)
		if k == other {
			break
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("another tenant's retry came after %s", d)
	}
}
