package watch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/globaldns/global/plugin/global/telemetry"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The watcher keeps small objects instead of the API objects: only what the index reads,
// converted once per event, so the cache stays small and the index never re-parses. Each kind's is
// in the file named for it: service (services.go), slice (endpointslices.go), podMirrorService
// and podMirrorSlice (podmirrors.go).

// meta is all of an object's metadata the watcher needs: its key and its version, as a number
// (0 when it is not one: then every relist counts it as changed).
type meta struct {
	namespace, name string
	version         uint64
}

func slimMeta(m *metav1.ObjectMeta) meta {
	v, _ := strconv.ParseUint(m.ResourceVersion, 10, 64)
	return meta{m.Namespace, m.Name, v}
}

// GetObjectMeta implements metav1.ObjectMetaAccessor, through which client-go's reflector keys
// the objects it streams at start.
func (m *meta) GetObjectMeta() metav1.Object {
	o := &metav1.ObjectMeta{Namespace: m.namespace, Name: m.name}
	if m.version != 0 {
		o.ResourceVersion = strconv.FormatUint(m.version, 10)
	}
	return o
}

func (m *meta) objectMeta() *meta { return m }

// GetObjectKind implements runtime.Object.
func (*meta) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// object is any of the kept objects.
type object interface {
	runtime.Object
	objectMeta() *meta
}

// feed is what one reflector watches, which decides how its objects are converted.
type feed uint8

const (
	fromLocal     feed = iota // Services selected by the export selector, and their slices
	fromMirror                // Linkerd's mirror Services, and the headless mirrors' slices
	fromPodMirror             // the slices of Linkerd's per-pod mirrors: only their readiness counts
)

func quote(s string) string {
	const max = 80 // keep log lines bounded whatever the object holds
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}

// problems collects what is wrong with one object so it is reported as one log line, with one
// metric increment per reason.
type problems struct {
	log     *problemLog        // nil: report every time
	meta    *metav1.ObjectMeta // of the object, named only if there is a problem
	reasons []string
	details []string // the first few, for the log line
	more    int      // details not kept
}

const maxDetails = 5

func (p *problems) add(reason, detail string) {
	p.reasons = append(p.reasons, reason)
	switch {
	case slices.Contains(p.details, detail):
	case len(p.details) < maxDetails:
		p.details = append(p.details, detail)
	default:
		p.more++
	}
}

func (p *problems) report() {
	more := ""
	if p.more > 0 {
		more = fmt.Sprintf(" (and %d more)", p.more)
	}
	line := strings.Join(p.details, "; ") + more
	if len(p.reasons) == 0 {
		line = ""
	}
	if p.log != nil && !p.log.changed(p.meta.Namespace, p.meta.Name, line) {
		return
	}
	if line == "" {
		return
	}
	for _, r := range p.reasons {
		telemetry.Skipped.WithLabelValues(r).Inc()
	}
	kind := "object"
	if p.log != nil {
		kind = p.log.kind
	}
	telemetry.Log.Warningf("%s %s/%s: %s", kind, p.meta.Namespace, p.meta.Name, line)
}

// problemLog remembers, per object of one reflector, the problems last reported, so an object is
// logged and counted once per distinct set of problems, not again on every update and relist.
// It holds only objects with problems.
type problemLog struct {
	kind string // Service or EndpointSlice
	mu   sync.Mutex
	last map[objectName]string // the log line last reported
}

type objectName struct{ namespace, name string }

func newProblemLog(kind string) *problemLog {
	return &problemLog{kind: kind, last: map[objectName]string{}}
}

// changed records line ("" for none) as the object's problems, reporting whether they differ
// from the last ones.
func (l *problemLog) changed(ns, name, line string) bool {
	k := objectName{ns, name}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, had := l.last[k]
	switch {
	case line == "" && had:
		delete(l.last, k)
		telemetry.ObjectsWithProblems.WithLabelValues(l.kind).Dec()
	case line != "" && !had:
		telemetry.ObjectsWithProblems.WithLabelValues(l.kind).Inc()
		fallthrough
	case line != "":
		l.last[k] = line
	}
	return line != prev
}

// forget drops a deleted object.
func (l *problemLog) forget(ns, name string) { l.changed(ns, name, "") }

// retain forgets every object a relist did not list.
func (l *problemLog) retain(objs []object) {
	l.mu.Lock()
	n := len(l.last)
	l.mu.Unlock()
	if n == 0 {
		return
	}
	listed := make(map[objectName]bool, len(objs))
	for _, o := range objs {
		m := o.objectMeta()
		listed[objectName{m.namespace, m.name}] = true
	}
	l.mu.Lock()
	var gone []objectName
	for k := range l.last {
		if !listed[k] {
			gone = append(gone, k)
		}
	}
	l.mu.Unlock()
	for _, k := range gone {
		l.forget(k.namespace, k.name)
	}
}

// kind is the API kind a reflector lists: Services or EndpointSlices.
type kind uint8

const (
	kindService kind = iota
	kindSlice
)
