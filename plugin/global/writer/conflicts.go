package writer

import (
	"fmt"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// conflicts remembers global services blocked by objects we do not manage, to report each once:
// a log line, the gauge, and a Kubernetes Event on the object in the way.
type conflicts struct {
	mu     sync.Mutex
	active map[index.Key]string
	events record.EventRecorder
}

func (c *conflicts) setRecorder(r record.EventRecorder) {
	c.mu.Lock()
	c.events = r
	c.mu.Unlock()
}

func (c *conflicts) report(k index.Key, obj metav1.Object, what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active[k] != what {
		c.active[k] = what
		telemetry.Log.Warningf("writer: %s: %s", k, what)
		if ro, ok := obj.(runtime.Object); ok && c.events != nil {
			c.events.Event(ro, corev1.EventTypeWarning, "GlobalServiceConflict", fmt.Sprintf("%s wants to write this name for global service %s: %s", ManagedBy, k, what))
		}
	}
	telemetry.WriterConflicts.Set(float64(len(c.active)))
	return errConflict
}

func (c *conflicts) clear(k index.Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.active[k]; ok {
		delete(c.active, k)
		telemetry.Log.Infof("writer: %s: conflict resolved", k)
		telemetry.WriterConflicts.Set(float64(len(c.active)))
	}
}
