// Package writer writes, for every global service, a headless Service `<svc>-global` and
// EndpointSlices with the union of its members, so that clients reading EndpointSlices (Linkerd's
// destination service, gateways, ...) see what DNS answers. It reads the same index as DNS. One
// replica writes at a time: Run is one leadership term (see Campaign).
//
// As in Kubernetes' endpointslicemirroring controller, the Writer (controller.go) runs the
// informers on our objects and the terms' work queue of global services, and the reconciler
// (reconciler.go) compares what the index wants with what the cache holds and writes the
// difference; the Writer uses it through its methods only.
package writer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

const (
	// conflictRecheck is how often a global service blocked by someone else's object is looked at
	// again: the object may go away, and nothing we watch would tell us.
	conflictRecheck = time.Minute
	// DefaultResync is how often a term reconciles every global service and looks for our objects
	// in namespaces no longer watched, on top of doing both when it starts.
	DefaultResync = 10 * time.Minute
)

// Writer keeps the written objects in line with the index: it runs the informers on them and
// the leadership terms, and has the reconciler write what a term's queue says.
type Writer struct {
	cfg    Config
	client kubernetes.Interface // for Events and discovery; the reconciler writes through its own
	index  *index.Index
	store  *store
	rec    *reconciler

	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[index.Key]] // of the current term

	term   sync.Mutex // held by a running term: terms never overlap
	mu     sync.Mutex
	closed bool
	terms  sync.WaitGroup
	stop   context.CancelFunc // ends the current term
}

// New returns a Writer for ix; it subscribes to ix, so call it before ix runs. Nothing runs
// before Start. mcs writes the ServiceImports (serviceimports on) or deletes those written before
// (off); nil, it does neither.
func New(client kubernetes.Interface, mcs mcsclient.Interface, ix *index.Index, namespaces []string, cfg Config) *Writer {
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if mcs == nil {
		cfg.ServiceImports = false
	}
	var storeMCS mcsclient.Interface
	if cfg.ServiceImports {
		storeMCS = mcs
	}
	st := newStore(client, storeMCS, namespaces, cfg.Owner)
	w := &Writer{cfg: cfg, client: client, index: ix, store: st, rec: newReconciler(cfg, client, mcs, st, namespaces)}
	ix.Subscribe(w.enqueue)
	for _, sc := range st.scopes {
		sc.services.AddEventHandler(w.echoes(nil))
		sc.slices.AddEventHandler(w.echoes(w.rec.ownEcho))
		if sc.imports != nil {
			sc.imports.AddEventHandler(w.echoes(nil))
		}
	}
	return w
}

// Start runs the informers on our objects until ctx is done, leader or not, so a new leader
// findImports starts the ServiceImport informers, and queues every global service, once the API
// serves ServiceImports (awaitImports).
func (w *Writer) findImports(ctx context.Context) {
	if !awaitImports(ctx, w.client.Discovery(), w.cfg.Resync, w.cfg.Suffix) {
		return
	}
	w.store.importsAvailable.Store(true)
	for _, f := range w.store.importFactories {
		f.Start(ctx.Done())
	}
	for _, k := range w.index.Snapshot().Keys() {
		w.enqueue(k)
	}
}

// starts with a warm cache.
func (w *Writer) Start(ctx context.Context) {
	bcast := record.NewBroadcaster()
	bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: w.client.CoreV1().Events("")})
	w.rec.startRecording(bcast)
	for _, f := range w.store.factories {
		f.Start(ctx.Done())
	}
	if w.cfg.ServiceImports {
		go w.findImports(ctx)
	} else {
		telemetry.ServiceImportsUnavailable.Set(0) // a reload turned it off
	}
	go func() {
		<-ctx.Done()
		for _, f := range w.store.factories {
			f.Shutdown()
		}
		for _, f := range w.store.importFactories {
			f.Shutdown()
		}
		bcast.Shutdown()
	}()
}

func (w *Writer) enqueue(k index.Key) {
	if q := w.queue.Load(); q != nil {
		(*q).Add(k)
	}
}

// echoes enqueues the global service of any change to our objects: someone else's edit or
// deletion is repaired. The exact echo of our own slice write is not: a sync of a big service
// compares every slice of it, and its own writes would double that. own, if not nil, tells an
// event that is such an echo.
func (w *Writer) echoes(own func(obj any, gone bool) bool) cache.ResourceEventHandler {
	on := func(obj any, gone bool) {
		if own != nil && own(obj, gone) {
			return
		}
		if k, ok := keyOf(obj); ok {
			w.enqueue(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { on(obj, false) },
		UpdateFunc: func(_, obj any) { on(obj, false) },
		DeleteFunc: func(obj any) { on(obj, true) },
	}
}

// Run is one leadership term: it reconciles every global service, then every change, until ctx
// is done or Close is called, and returns once no write is in flight. A term starts only once the
// previous one has returned: client-go runs OnStartedLeading in a goroutine and may start the next
// term (re-acquiring a Lease that still names this replica) while the last one winds down.
func (w *Writer) Run(ctx context.Context) {
	w.term.Lock()
	defer w.term.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.terms.Add(1)
	w.mu.Unlock()
	defer w.terms.Done()

	synced := []cache.InformerSynced{func() bool { return w.index.Ready() }}
	for _, sc := range w.store.scopes {
		synced = append(synced, sc.services.HasSynced, sc.slices.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}

	w.rec.forgetPlans()
	q := newTermQueue()
	w.queue.Store(&q)
	defer w.queue.CompareAndSwap(&q, nil) // only its own: never a later term's

	var workers sync.WaitGroup
	for range max(w.cfg.Workers, 1) {
		workers.Go(func() {
			for w.process(ctx, q) {
			}
		})
	}
	// Every term starts from the full state, and looks at it all again every Resync: anything may
	// have changed while another replica wrote, or none did, or under other settings. Objects
	// whose global service is gone, or that other settings wrote, are found through the store.
	workers.Go(func() {
		tick := time.NewTicker(w.cfg.Resync)
		defer tick.Stop()
		for {
			for _, k := range w.index.Snapshot().Keys() {
				q.Add(k)
			}
			for _, k := range w.store.keys() {
				q.Add(k)
			}
			w.rec.sweepOutside(ctx)
			w.rec.sweepImports(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	<-ctx.Done()
	q.ShutDown()
	workers.Wait()
}

// Close ends the current term and waits for it; no term starts afterwards. Call it before
// releasing the lease, so that no write happens once another replica may lead.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	if w.stop != nil {
		w.stop()
	}
	w.mu.Unlock()
	w.terms.Wait()
}

func (w *Writer) process(ctx context.Context, q workqueue.TypedRateLimitingInterface[index.Key]) bool {
	k, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(k)

	start := time.Now()
	err := w.rec.sync(ctx, k, w.index.Snapshot().Service(k))
	telemetry.WriterSyncDuration.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		telemetry.WriterSyncs.WithLabelValues("success").Inc()
		q.Forget(k)
	case errors.Is(err, errTerminating):
		// Dropped until its next change: every create fails until the namespace is gone.
		telemetry.WriterSyncs.WithLabelValues("terminating").Inc()
		q.Forget(k)
		if w.rec.newlyTerminating(k.Namespace) {
			telemetry.Log.Infof("writer: namespace %s is terminating: its global services are not written", k.Namespace)
		}
	case errors.Is(err, errStale):
		telemetry.WriterSyncs.WithLabelValues("stale").Inc()
		q.AddRateLimited(k)
	case errors.Is(err, errOwnerMissing): // logged once by the owner's read
		telemetry.WriterSyncs.WithLabelValues("owner_missing").Inc()
		q.Forget(k)
		q.AddAfter(k, ownerRefresh)
	case errors.Is(err, errConflict):
		telemetry.WriterSyncs.WithLabelValues("conflict").Inc()
		q.Forget(k)
		q.AddAfter(k, conflictRecheck)
	case apierrors.IsConflict(err):
		// A write carried an older resourceVersion than the API's: the cache is behind, as for
		// errStale. Nothing is wrong; try again from the next state.
		telemetry.WriterSyncs.WithLabelValues("stale").Inc()
		telemetry.Log.Debugf("writer: %s: %v", k, err)
		q.AddRateLimited(k)
	default:
		telemetry.WriterSyncs.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			telemetry.Log.Warningf("writer: %s: %v", k, err)
		}
		q.AddRateLimited(k)
	}
	return true
}
