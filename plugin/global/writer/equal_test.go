package writer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

// TestEndpointsEqual checks endpointsEqual against apiequality.Semantic.DeepEqual, which it
// replaces, on endpoint lists that differ in one random field each time (every field of the API's
// Endpoint, pointers nil or to a zero value, lists nil or empty), or not at all.
func TestEndpointsEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	edits := []func(e *discoveryv1.Endpoint){
		func(e *discoveryv1.Endpoint) { e.Addresses = append(e.Addresses, "10.9.9.9") },
		func(e *discoveryv1.Endpoint) { e.Addresses[0] = "10.0.0.254" },
		func(e *discoveryv1.Endpoint) { e.Conditions.Ready = nil },
		func(e *discoveryv1.Endpoint) { e.Conditions.Serving = ptr.To(!*e.Conditions.Serving) },
		func(e *discoveryv1.Endpoint) { e.Conditions.Terminating = ptr.To(false) },
		func(e *discoveryv1.Endpoint) { e.Hostname = ptr.To("") },
		func(e *discoveryv1.Endpoint) { e.Hostname = nil },
		func(e *discoveryv1.Endpoint) { e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "foo-0"} },
		func(e *discoveryv1.Endpoint) { e.DeprecatedTopology = map[string]string{"a": "b"} },
		func(e *discoveryv1.Endpoint) { e.NodeName = ptr.To("node-1") },
		func(e *discoveryv1.Endpoint) { e.Zone = nil },
		func(e *discoveryv1.Endpoint) { e.Zone = ptr.To("us-east-1b") },
		func(e *discoveryv1.Endpoint) { e.Hints = &discoveryv1.EndpointHints{} }, // present, empty
		func(e *discoveryv1.Endpoint) {
			e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "us-east-1a"}}}
		},
		func(e *discoveryv1.Endpoint) {
			e.Hints = &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "node-1"}}}
		},
		func(e *discoveryv1.Endpoint) { e.Hostname = ptr.To(strings.Repeat("h", 600)) }, // past the stack buffer
		func(*discoveryv1.Endpoint) {}, // none
	}
	for i := range 2000 {
		a := testEndpoints(1 + rng.IntN(5))
		b := testEndpoints(len(a))
		if rng.IntN(4) == 0 { // nil and empty lists, which both mean none
			a[0].DeprecatedTopology, b[0].DeprecatedTopology = map[string]string{}, nil
		}
		edits[rng.IntN(len(edits))](&b[rng.IntN(len(b))])
		if rng.IntN(20) == 0 {
			b = b[1:]
		}
		if got, want := endpointsEqual(a, b), apiequality.Semantic.DeepEqual(a, b); got != want {
			t.Fatalf("case %d: endpointsEqual = %v, Semantic.DeepEqual %v:\n%+v\n%+v", i, got, want, a, b)
		}
	}
}

// testEndpoints is n endpoints as the writer writes them.
func testEndpoints(n int) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, n)
	for i := range out {
		out[i] = discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			Hostname:   ptr.To(fmt.Sprintf("foo-%d-west", i)),
			Zone:       ptr.To("us-east-1a"),
		}
	}
	return out
}

// BenchmarkSliceUpToDate compares a written slice of 100 endpoints with its desired, equal, state:
// what a sync of a big service does for each of its slices.
func BenchmarkSliceUpToDate(b *testing.B) {
	have := &discoveryv1.EndpointSlice{Endpoints: testEndpoints(100), Ports: []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	want := have.DeepCopy()
	b.ReportAllocs()
	for b.Loop() {
		if !sliceUpToDate(have, want) {
			b.Fatal("not up to date")
		}
	}
}

// A label of empty value is up to date only when it is there: the one the writer adds to the slices
// of an earlier release (service.kubernetes.io/headless) must make it write them.
func TestLabelsUpToDate(t *testing.T) {
	want := map[string]string{"a": "1", corev1.IsHeadlessService: ""}
	for _, c := range []struct {
		have map[string]string
		ok   bool
	}{
		{map[string]string{"a": "1", corev1.IsHeadlessService: ""}, true},
		{map[string]string{"a": "1", corev1.IsHeadlessService: "", "other": "x"}, true},
		{map[string]string{"a": "1"}, false},
		{map[string]string{"a": "2", corev1.IsHeadlessService: ""}, false},
		{nil, false},
	} {
		if got := labelsUpToDate(c.have, want); got != c.ok {
			t.Errorf("labelsUpToDate(%v, %v) = %v, want %v", c.have, want, got, c.ok)
		}
	}
}

// TestWriteReasons: the debug log of a write names what the comparison found different (for an
// endpoint, which one and its fields), and nothing when it found nothing.
func TestWriteReasons(t *testing.T) {
	want := &discoveryv1.EndpointSlice{Endpoints: testEndpoints(2), Ports: normalPorts([]discoveryv1.EndpointPort{{Port: ptr.To[int32](5432)}})}
	want.Labels = map[string]string{LabelManagedBy: ManagedBy}
	have := want.DeepCopy()
	if d := diff(sliceParts, have, want); d != "" || !sliceUpToDate(have, want) {
		t.Errorf("equal slices: diff %q", d)
	}
	have.Labels = nil
	have.Endpoints = have.Endpoints[:1]
	if d := diff(sliceParts, have, want); d != "labels, endpoints (1, want 2)" || sliceUpToDate(have, want) {
		t.Errorf("diff %q", d)
	}
	have = want.DeepCopy()
	have.Endpoints[1].Conditions.Ready = ptr.To(!ptr.Deref(want.Endpoints[1].Conditions.Ready, false))
	have.Endpoints[1].Zone = ptr.To("elsewhere")
	wantDiff := "endpoints (2, want 2; #1 " + want.Endpoints[1].Addresses[0] + ": conditions, zone)"
	if d := diff(sliceParts, have, want); d != wantDiff || sliceUpToDate(have, want) {
		t.Errorf("diff %q, want %q", d, wantDiff)
	}

	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}}}
	svc.Labels = map[string]string{LabelManagedBy: ManagedBy}
	stored := svc.DeepCopy()
	if d := diff(serviceParts, stored, svc); d != "" || !serviceUpToDate(stored, svc) {
		t.Errorf("equal Services: diff %q", d)
	}
	stored.Spec.Selector = map[string]string{"app": "db"}
	stored.Spec.Ports = nil
	if d := diff(serviceParts, stored, svc); d != "selector, ports (0, want 1)" || serviceUpToDate(stored, svc) {
		t.Errorf("Service diff %q", d)
	}
}
