package watch

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// The watcher keeps these instead of the API objects: only what the index reads, converted once
// per event, so the cache stays small and the index never re-parses.

// service is a Service as the index sees it.
type service struct {
	meta
	member *index.Member // nil: not a member of any global service
	global string        // the global service's name, in the same namespace
}

func (s *service) key() index.Key { return index.Key{Namespace: s.namespace, Name: s.global} }

// podMirror is one of Linkerd's per-pod mirrors (a ClusterIP Service): the headless mirror it
// belongs to and its ClusterIP, the address of the record whose liveness it tells.
type podMirror struct {
	meta
	root string
	ip   netip.Addr
}

// slice is an EndpointSlice as the index sees it.
type slice struct {
	meta
	service string       // kubernetes.io/service-name
	slice   *index.Slice // nil: skipped
}

// podSlice is an EndpointSlice of a per-pod mirror: only whether it has a ready endpoint counts.
type podSlice struct {
	meta
	pod   string // the per-pod mirror, its kubernetes.io/service-name
	ready bool
}

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

// The stored objects are never mutated, so a shallow copy is a deep copy.
func (s *service) DeepCopyObject() runtime.Object   { c := *s; return &c }
func (s *podMirror) DeepCopyObject() runtime.Object { c := *s; return &c }
func (s *slice) DeepCopyObject() runtime.Object     { c := *s; return &c }
func (s *podSlice) DeepCopyObject() runtime.Object  { c := *s; return &c }

// object is any of the above.
type object interface {
	runtime.Object
	objectMeta() *meta
}

// source is what one reflector watches, which decides how its objects are converted.
type source uint8

const (
	fromLocal     source = iota // Services selected by the export selector, and their slices
	fromMirror                  // Linkerd's mirror Services, and the headless mirrors' slices
	fromPodMirror               // the slices of Linkerd's per-pod mirrors: only their readiness counts
)

// transform returns the conversion of one source's objects, reporting their problems to log. It
// must never fail (an error would stall the reflector) and must be idempotent (objects streamed
// at start are converted twice).
func transform(src source, log *problemLog) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Service:
			o.Namespace = namespaces.get(o.Namespace, o.Namespace)
			p := problems{log: log, meta: &o.ObjectMeta}
			defer p.report()
			m := slimMeta(&o.ObjectMeta)
			if src != fromMirror {
				member, global := localMember(o, &p)
				return &service{meta: m, member: member, global: global.Name}, nil
			}
			if root, ip := podMirrorOf(o, &p); root != "" {
				return &podMirror{meta: m, root: root, ip: ip}, nil
			}
			member, global := mirrorMember(o, &p)
			return &service{meta: m, member: member, global: global.Name}, nil
		case *discoveryv1.EndpointSlice:
			o.Namespace = namespaces.get(o.Namespace, o.Namespace)
			p := problems{log: log, meta: &o.ObjectMeta}
			defer p.report()
			m, svc := slimMeta(&o.ObjectMeta), o.Labels[discoveryv1.LabelServiceName]
			if svc == "" {
				p.add(ReasonNoServiceLabel, "no "+discoveryv1.LabelServiceName+" label")
			}
			if src == fromPodMirror {
				ready := slices.ContainsFunc(o.Endpoints, func(e discoveryv1.Endpoint) bool { return ptr.Deref(e.Conditions.Ready, true) })
				return &podSlice{meta: m, pod: svc, ready: ready}, nil
			}
			s := &slice{meta: m, service: svc}
			if svc != "" {
				s.slice = convertSlice(o, src == fromMirror, &p)
			}
			if s.slice != nil && src == fromMirror {
				s.slice.Annotations = mirrorSliceAnnotations(o, &p)
			}
			return s, nil
		}
		return obj, nil // already converted
	}
}

// convertSlice reduces an EndpointSlice to an index.Slice; nil when the whole slice is unusable.
// A mirror's endpoint without a hostname is left out (counted in Unnamed): Linkerd mirrors only
// pods with hostnames into a headless mirror (cluster_watcher_headless.go
// createOrUpdateHeadlessEndpoints), and on a change of the remote Service it writes the gateway's
// address there, without one, as into a ClusterIP mirror (cluster_watcher.go
// handleRemoteExportedServiceUpdated; handleRemoteServiceUpdated in 2.14); the index warns of it
// for headless mirrors (a ClusterIP mirror's slices, in the same table, have no other endpoints,
// and are members of nothing).
func convertSlice(es *discoveryv1.EndpointSlice, mirror bool, p *problems) *index.Slice {
	var fam index.Family
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4:
		fam = index.IPv4
	case discoveryv1.AddressTypeIPv6:
		fam = index.IPv6
	default:
		p.add(ReasonFQDNSlice, "address type "+quote(string(es.AddressType)))
		return nil
	}
	out := &index.Slice{Family: fam, Endpoints: make([]index.Endpoint, 0, len(es.Endpoints))}
	for _, sp := range es.Ports {
		if sp.Port == nil {
			p.add(ReasonPortWithoutNumber, "a port without a number")
			continue
		}
		out.Ports = append(out.Ports, index.Port{Name: ptr.Deref(sp.Name, ""), Port: *sp.Port, Protocol: protocol(ptr.Deref(sp.Protocol, ""))})
	}
	out.Ports = internPorts(out.Ports)
	for i := range es.Endpoints {
		e := &es.Endpoints[i]
		ready := ptr.Deref(e.Conditions.Ready, true) // nil means ready, as in Kubernetes
		ep := index.Endpoint{
			Ready: ready,
			// Without a serving condition (the mirroring controller sets none), serving is ready.
			Serving:     ptr.Deref(e.Conditions.Serving, ready),
			Terminating: ptr.Deref(e.Conditions.Terminating, false),
		}
		if e.Zone != nil || e.NodeName != nil || e.TargetRef != nil {
			ep.Local = &index.Placement{Zone: ptr.Deref(e.Zone, ""), NodeName: ptr.Deref(e.NodeName, "")}
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				ep.Local.Pod = e.TargetRef.Name
			}
		}
		// Kubernetes validates addresses; a cache can still hold anything. An IPv4-mapped IPv6
		// address would answer AAAA for an IPv4 endpoint and name it with dots. Only the first
		// valid address counts, as in Kubernetes' own consumers.
		var addr netip.Addr
		for _, a := range e.Addresses {
			ip, err := netip.ParseAddr(a)
			if err != nil || ip.Zone() != "" || ip.Is4In6() || (fam == index.IPv4) != ip.Is4() {
				p.add(ReasonBadAddress, "address "+quote(a))
				continue
			}
			if !addr.IsValid() {
				addr = ip
			}
		}
		if !addr.IsValid() {
			continue
		}
		ep.SetAddr(addr)
		ep.Host = ptr.Deref(e.Hostname, "")
		if ep.Host != "" && len(validation.IsDNS1123Label(ep.Host)) > 0 {
			p.add(ReasonBadHostname, "hostname "+quote(ep.Host)+" is not a DNS label: taken as none")
			ep.Host = ""
		}
		switch {
		case ep.Host == "" && mirror:
			out.Unnamed++
			continue
		case ep.Host == "":
			ep.Host = dashed(addr)
		}
		out.Endpoints = append(out.Endpoints, ep)
	}
	return out
}

// dashed is the hostname CoreDNS's kubernetes plugin gives an endpoint without one: 10-244-1-5,
// fd00--1 (with a 0 added where a dash would start or end the label).
func dashed(a netip.Addr) string {
	if a.Is4() {
		return strings.ReplaceAll(a.String(), ".", "-")
	}
	h := strings.ReplaceAll(a.String(), ":", "-")
	if strings.HasSuffix(h, "-") {
		h += "0"
	}
	if strings.HasPrefix(h, "-") {
		h = "0" + h
	}
	return h
}

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

// problemLog remembers, per object of one table, the problems last reported, so an object is
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
