package writer

import (
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	"k8s.io/client-go/util/workqueue"
)

// fairQueue is the order in which a term's workers take global services: a namespace at a time,
// in turn, each namespace's in the order they came. One tenant's burst (a thousand Services made
// at once) then waits behind itself, not before every other namespace's: the writer's client has
// one token bucket (apiserver_qps), and a first-come queue would hand it to the burst whole. It is
// the workqueue's Queue (workqueue.TypedQueueConfig): the workqueue keeps each key in it once, and
// calls it under its own lock.
type fairQueue struct {
	byNamespace map[string][]index.Key // waiting, per namespace, first come first
	turns       []string               // the namespaces with keys waiting, in turn
	n           int
}

func newFairQueue() *fairQueue { return &fairQueue{byNamespace: map[string][]index.Key{}} }

var _ workqueue.Queue[index.Key] = (*fairQueue)(nil)

// Touch implements workqueue.Queue: a key added again keeps its place.
func (q *fairQueue) Touch(index.Key) {}

// Push implements workqueue.Queue.
func (q *fairQueue) Push(k index.Key) {
	waiting := q.byNamespace[k.Namespace]
	if len(waiting) == 0 {
		q.turns = append(q.turns, k.Namespace)
	}
	q.byNamespace[k.Namespace] = append(waiting, k)
	q.n++
}

// Len implements workqueue.Queue.
func (q *fairQueue) Len() int { return q.n }

// Pop implements workqueue.Queue: the first key of the namespace whose turn it is, which then
// waits for its next turn behind the others.
func (q *fairQueue) Pop() index.Key {
	ns := q.turns[0]
	q.turns[0] = ""
	q.turns = q.turns[1:]
	waiting := q.byNamespace[ns]
	k := waiting[0]
	if len(waiting) == 1 {
		delete(q.byNamespace, ns)
	} else {
		q.byNamespace[ns] = waiting[1:]
		q.turns = append(q.turns, ns)
	}
	q.n--
	return k
}

// newTermQueue returns a term's work queue over a fairQueue, whose retries back off per key
// (5 ms doubling to 1000 s, as client-go's default), and per key only, as Kubernetes' EndpointSlice
// controllers': the default controller rate limiter also holds every retry of every key to one
// bucket of 10 a second, so one tenant's failing services, or a big service waiting for the echo of
// its writes, would delay everyone's. The writer's client has its own rate limit (apiserver_qps).
func newTermQueue() workqueue.TypedRateLimitingInterface[index.Key] {
	fair := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[index.Key]{Name: telemetry.Plugin, Queue: newFairQueue()})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[index.Key]{Name: telemetry.Plugin, Queue: fair})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[index.Key](5*time.Millisecond, 1000*time.Second),
		workqueue.TypedRateLimitingQueueConfig[index.Key]{Name: telemetry.Plugin, DelayingQueue: delaying})
}
