package watch

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// A copy the interners keep goes when no object holds it: a Service updated with new ports over
// and over leaves nothing behind, and equal lists still share one copy while held.
func TestInternersForget(t *testing.T) {
	before := portLists.len()
	var held [][]index.Port
	for i := range 500 {
		ps := []index.Port{{Name: "p", Port: int32(10000 + i), Protocol: "TCP"}}
		if i%100 == 0 {
			held = append(held, internPorts(ps))
		} else {
			internPorts(ps)
		}
	}
	again := internPorts([]index.Port{{Name: "p", Port: 10000, Protocol: "TCP"}})
	if &again[0] != &held[0][0] {
		t.Error("an equal list held is not shared")
	}
	name := internString(places, strings.Repeat("z", 40))
	deadline := time.Now().Add(30 * time.Second)
	for portLists.len() > before+len(held) && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups run on a goroutine of their own
	}
	if n := portLists.len(); n != before+len(held) {
		t.Errorf("%d port lists kept, want %d: those no object holds are not forgotten", n, before+len(held))
	}
	if got := internString(places, strings.Repeat("z", 40)); got != name {
		t.Errorf("interned %q", got)
	}
	runtime.KeepAlive(held)
	runtime.KeepAlive(name)
}

// What is kept of one object is bounded: the first 100 ports of a Service or a slice, and no
// annotation value longer than 1 KiB, each reported.
func TestKeptIsBounded(t *testing.T) {
	s := mirrorService("foo-west", func(s *corev1.Service) {
		s.Spec.Ports = nil
		for i := range 16000 {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(1 + i)})
		}
		s.Annotations[index.AnnotationOpaquePorts] = strings.Repeat("1,", 100000)
	})
	p := &problems{}
	m, _ := mirrorMember(s, p)
	if m == nil || len(m.Ports) != maxPorts || m.Ports[maxPorts-1].Name != fmt.Sprint("p", maxPorts-1) || m.Settings != nil {
		t.Fatalf("member %+v: want the first %d ports and no annotation", m, maxPorts)
	}
	if want := []string{ReasonTooManyPorts, ReasonLongAnnotation}; fmt.Sprint(p.reasons) != fmt.Sprint(want) {
		t.Errorf("reasons %v, want %v", p.reasons, want)
	}
	es := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	for i := range 20000 {
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(fmt.Sprintf("p%d", i)), Port: ptr.To(int32(1 + i))})
	}
	p = &problems{}
	if ps := convertPorts(es.Ports, p); len(ps) != maxPorts || fmt.Sprint(p.reasons) != fmt.Sprint([]string{ReasonTooManyPorts}) {
		t.Errorf("slice ports: %d kept, reasons %v", len(ps), p.reasons)
	}
}
