package writer

import (
	"errors"
	"fmt"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// What a conflict blocks: the <svc>-global Service and its slices, or the MCS objects
// (ServiceImport and its slices). Each is reported and cleared on its own: a ServiceImport made by
// another MCS implementation blocks only ours, never the -global objects.
const (
	blocksGlobal = "global"
	blocksMCS    = "mcs"
)

// errConflict: an object we do not manage holds one of our names; it is left alone.
var errConflict = errors.New("name taken by an object not managed by " + ManagedBy)

type conflictKey struct {
	index.Key
	blocks string
}

// conflicts remembers global services blocked by objects we do not manage, to report each once:
// a log line, the gauge, and a Kubernetes Event on the object in the way.
type conflicts struct {
	mu     sync.Mutex
	active map[conflictKey]string
	events record.EventRecorder
}

func newConflicts() *conflicts { return &conflicts{active: map[conflictKey]string{}} }

func (c *conflicts) setRecorder(r record.EventRecorder) {
	c.mu.Lock()
	c.events = r
	c.mu.Unlock()
}

func (c *conflicts) report(k index.Key, blocks string, obj metav1.Object, what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ck := conflictKey{k, blocks}
	if c.active[ck] != what {
		c.active[ck] = what
		// "conflict" in the line, as in its resolution's: the runbook greps for it.
		telemetry.Log.Warningf("writer: %s: conflict: %s", k, what)
		if ro, ok := obj.(runtime.Object); ok && c.events != nil {
			c.events.Event(ro, corev1.EventTypeWarning, "GlobalServiceConflict", fmt.Sprintf("%s wants to write this name for global service %s: %s", ManagedBy, k, what))
		}
	}
	c.setGauge()
	return errConflict
}

// clear forgets k's conflicts of kind blocks ("" for every kind).
func (c *conflicts) clear(k index.Key, blocks string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range []string{blocksGlobal, blocksMCS} {
		ck := conflictKey{k, b}
		if _, ok := c.active[ck]; ok && (blocks == "" || blocks == b) {
			delete(c.active, ck)
			telemetry.Log.Infof("writer: %s: conflict resolved", k)
		}
	}
	c.setGauge()
}

// setGauge counts global services, not conflicts: one blocked twice is one.
func (c *conflicts) setGauge() {
	keys := map[index.Key]bool{}
	for ck := range c.active {
		keys[ck.Key] = true
	}
	telemetry.WriterConflicts.Set(float64(len(keys)))
}
