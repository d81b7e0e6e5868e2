package watch

import (
	"fmt"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"
	"github.com/globaldns/global/test/testkit"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// recorder is a Sink that remembers what changed.
type recorder struct{ changed []index.Key }

func (r *recorder) Changed(k index.Key) { r.changed = append(r.changed, k) }
func (r *recorder) Start()              {}

func (r *recorder) take() []index.Key {
	out := r.changed
	r.changed = nil
	return out
}

// stores returns the reflector stores of one Watcher of namespace ns: mirror Services, per-pod
// mirror slices, mirror slices.
func stores(w *Watcher, ns string) (services, podSlices, slices *reflectorStore) {
	for _, t := range w.stores {
		if t.namespace != ns || t.src == fromLocal {
			continue
		}
		switch {
		case t.kind == kindService:
			services = t
		case t.src == fromPodMirror:
			podSlices = t
		default:
			slices = t
		}
	}
	return
}

func podService(name, ip, version string) *corev1.Service {
	return mirrorService(name, func(s *corev1.Service) {
		s.Labels[LabelHeadlessMirror] = "foo-west"
		s.Spec.ClusterIP = ip
		s.ResourceVersion = version
	})
}

func podSliceObj(name, pod string, ready bool, version string) *discoveryv1.EndpointSlice {
	es := mirrorSlice(name, pod, "172.31.255.1")
	es.Labels[LabelHeadlessMirror] = "foo-west"
	es.Endpoints[0].Conditions.Ready = ptr.To(ready)
	es.ResourceVersion = version
	return es
}

// The per-pod mirrors' liveness, whatever order their Service and slices arrive in; relists
// change only what changed, and only in their own namespace.
func TestStatePodMirrors(t *testing.T) {
	w, err := New(fake.NewClientset(), []string{"db", "other"}, DefaultExportSelector) // never run
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w.objects.setSink(rec)
	services, podSlices, mirrorSlices := stores(w, "db")
	otherServices, otherPodSlices, _ := stores(w, "other")
	foo := index.Key{Namespace: "db", Name: "foo"}
	member := func() *index.Member { return w.Members(foo)[0] }
	// Every change of liveness comes with a new generation, or the index would keep merging a
	// big service's records with stale gateway states.
	gen := func() uint64 {
		if ms := w.Members(foo); len(ms) > 0 {
			return w.PodMirrorGeneration(ms[0])
		}
		return 0
	}
	lastLive, lastGen := "", gen()
	liveness := func() string {
		t.Helper()
		live := fmt.Sprint(w.PodMirrors(member()))
		if g := gen(); live != lastLive && g == lastGen {
			t.Errorf("liveness %s (was %s) with the same generation %d", live, lastLive, g)
		}
		lastLive, lastGen = live, gen()
		return live
	}

	// A per-pod slice first, then the headless mirror, then the per-pod Service.
	testkit.Must(t, podSlices.Add(podSliceObj("foo-0-west-abcde", "foo-0-west", true, "1")))
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a per-pod slice of an unknown mirror notified %v", got)
	}
	headless := mirrorService("foo-west", func(s *corev1.Service) { s.ResourceVersion = "1" })
	testkit.Must(t, services.Add(headless))
	testkit.Must(t, mirrorSlices.Add(mirrorSlice("foo-west-1", "foo-west", "10.96.0.10")))
	testkit.Must(t, services.Add(podService("foo-0-west", "10.96.0.10", "2")))
	if got := liveness(); got != "[{10.96.0.10 true}]" {
		t.Errorf("liveness %s", got)
	}
	if got := rec.take(); !slices.Equal(got, []index.Key{foo, foo, foo}) {
		t.Errorf("notified %v", got)
	}

	// The gateway goes down: the slice turns not ready.
	testkit.Must(t, podSlices.Update(podSliceObj("foo-0-west-abcde", "foo-0-west", false, "3")))
	if got := liveness(); got != "[{10.96.0.10 false}]" {
		t.Errorf("gateway down: liveness %s", got)
	}
	if got := rec.take(); !slices.Equal(got, []index.Key{foo}) {
		t.Errorf("notified %v", got)
	}

	// A relist with nothing changed notifies nothing; relists of the other namespace touch nothing here.
	testkit.Must(t, podSlices.Replace([]any{podSliceObj("foo-0-west-abcde", "foo-0-west", false, "3")}, "3"))
	testkit.Must(t, services.Replace([]any{headless.DeepCopy(), podService("foo-0-west", "10.96.0.10", "2")}, "3"))
	testkit.Must(t, otherServices.Replace(nil, "3"))
	testkit.Must(t, otherPodSlices.Replace(nil, "3"))
	if got := rec.take(); len(got) != 0 {
		t.Errorf("unchanged relists notified %v", got)
	}
	// Per-pod mirrors keep no version: new versions of the same content change nothing either.
	testkit.Must(t, podSlices.Replace([]any{podSliceObj("foo-0-west-abcde", "foo-0-west", false, "7")}, "7"))
	testkit.Must(t, services.Replace([]any{headless.DeepCopy(), podService("foo-0-west", "10.96.0.10", "7")}, "7"))
	if got := rec.take(); len(got) != 0 {
		t.Errorf("relists of new versions of the same per-pod mirror notified %v", got)
	}
	// A new address of the per-pod mirror is a change.
	testkit.Must(t, services.Replace([]any{headless.DeepCopy(), podService("foo-0-west", "10.96.0.11", "8")}, "8"))
	if got := liveness(); got != "[{10.96.0.11 false}]" {
		t.Errorf("new address: liveness %s", got)
	}
	if got := rec.take(); !slices.Equal(got, []index.Key{foo}) {
		t.Errorf("new address notified %v", got)
	}
	testkit.Must(t, services.Replace([]any{headless.DeepCopy(), podService("foo-0-west", "10.96.0.10", "9")}, "9"))
	rec.take()
	if got := liveness(); got != "[{10.96.0.10 false}]" {
		t.Errorf("after relists: liveness %s", got)
	}

	// A relist without the slice deletes it: a per-pod mirror without a slice tells nothing, as
	// before kube-controller-manager mirrors a new one's Endpoints; the record's own readiness
	// stands.
	testkit.Must(t, podSlices.Replace(nil, "4"))
	if got := liveness(); got != "[]" {
		t.Errorf("no slice: liveness %s", got)
	}
	// The per-pod Service goes: no liveness at all, and nothing is left of it.
	testkit.Must(t, services.Delete(podService("foo-0-west", "10.96.0.10", "2")))
	if got := liveness(); got != "[]" {
		t.Errorf("no per-pod mirror: liveness %s", got)
	}
	if sp := w.objects.byNamespace["db"]; len(sp.podMirrors) != 0 || len(sp.podMirrorLists) != 0 || len(sp.podMirrorSlices) != 0 {
		t.Errorf("left behind: %v %v %v", sp.podMirrors, sp.podMirrorLists, sp.podMirrorSlices)
	}
}

// Each headless mirror's per-pod mirrors have a generation of their own: every write that
// changes their liveness makes a new one (each kind of write alone), and a write to another
// headless mirror's per-pod mirrors does not, so the index keeps merging that one's big services.
func TestPodMirrorGenerations(t *testing.T) {
	w, err := New(fake.NewClientset(), []string{"db"}, DefaultExportSelector) // never run
	if err != nil {
		t.Fatal(err)
	}
	services, podSlices, mirrorSlices := stores(w, "db")
	testkit.Must(t, services.Add(mirrorService("foo-west", nil)))
	testkit.Must(t, mirrorSlices.Add(mirrorSlice("foo-west-1", "foo-west", "10.96.0.10")))
	testkit.Must(t, services.Add(mirrorService("bar-west", func(s *corev1.Service) {
		s.Annotations[AnnotationRemoteFQName] = "bar.db.svc.cluster.local"
	})))
	barPod := podService("bar-0-west", "10.96.0.20", "1")
	barPod.Labels[LabelHeadlessMirror] = "bar-west"
	barSlice := podSliceObj("bar-0-west-abcde", "bar-0-west", true, "1")
	barSlice.Labels[LabelHeadlessMirror] = "bar-west"
	testkit.Must(t, services.Add(podService("foo-0-west", "10.96.0.10", "1")))
	testkit.Must(t, services.Add(podService("foo-1-west", "10.96.0.12", "1")))
	testkit.Must(t, podSlices.Add(podSliceObj("foo-0-west-abcde", "foo-0-west", true, "1")))

	gen := func(name string) uint64 {
		return w.PodMirrorGeneration(w.Members(index.Key{Namespace: "db", Name: name})[0])
	}
	live := func() string { return fmt.Sprint(w.PodMirrors(w.Members(index.Key{Namespace: "db", Name: "foo"})[0])) }
	for _, step := range []struct {
		what  string
		write func() error
		foo   bool // changes foo's per-pod mirrors
		live  bool // and their liveness (a per-pod mirror without a slice has none)
	}{
		{"a slice of foo-1-west comes, ready", func() error { return podSlices.Add(podSliceObj("foo-1-west-abcde", "foo-1-west", true, "2")) }, true, true},
		{"bar's per-pod mirror comes", func() error { return services.Add(barPod) }, false, false},
		{"bar's per-pod slice comes", func() error { return podSlices.Add(barSlice) }, false, false},
		{"the slice of foo-1-west goes", func() error { return podSlices.Delete(podSliceObj("foo-1-west-abcde", "foo-1-west", true, "2")) }, true, true},
		{"bar's per-pod slice goes", func() error { return podSlices.Delete(barSlice) }, false, false},
		{"foo-1-west goes, foo-0-west stays", func() error { return services.Delete(podService("foo-1-west", "10.96.0.12", "1")) }, true, false},
	} {
		fooGen, barGen, before := gen("foo"), gen("bar"), live()
		testkit.Must(t, step.write())
		if after := live(); (after != before) != step.live {
			t.Fatalf("%s: foo's liveness %s, was %s", step.what, after, before)
		}
		if changed := gen("foo") != fooGen; changed != step.foo {
			t.Errorf("%s: foo's generation changed: %v, want %v", step.what, changed, step.foo)
		}
		if !step.foo && gen("bar") == barGen {
			t.Errorf("%s: bar's generation did not change", step.what)
		}
	}
}

// A bad object is logged and counted once however often it is updated or relisted, again when
// its problems change, and the gauge follows the objects that have problems while they last.
func TestProblemsReportedOncePerObject(t *testing.T) {
	w, err := New(fake.NewClientset(), []string{"db"}, DefaultExportSelector) // never run
	if err != nil {
		t.Fatal(err)
	}
	services, _, _ := stores(w, "db")
	counted := func(reason string) float64 { return testutil.ToFloat64(telemetry.Skipped.WithLabelValues(reason)) }
	gauge := func() float64 { return testutil.ToFloat64(telemetry.ObjectsWithProblems.WithLabelValues("Service")) }
	noLabel, badName := counted(ReasonNoClusterLabel), counted(ReasonBadClusterName)
	startGauge := gauge()
	unlabelled := func(version string) *corev1.Service {
		return mirrorService("foo-west", func(s *corev1.Service) {
			delete(s.Labels, LabelClusterName)
			s.ResourceVersion = version
		})
	}

	for v := range 5 {
		testkit.Must(t, services.Update(unlabelled(fmt.Sprint(v+1))))
	}
	testkit.Must(t, services.Replace([]any{unlabelled("6")}, "6"))
	if n := counted(ReasonNoClusterLabel) - noLabel; n != 1 {
		t.Errorf("5 updates and a relist of one bad object counted %v times", n)
	}
	if g := gauge() - startGauge; g != 1 {
		t.Errorf("objects with problems: %v", g)
	}

	// Another problem is reported; fixing it clears the gauge.
	testkit.Must(t, services.Update(mirrorService("foo-west", func(s *corev1.Service) { s.Labels[LabelClusterName] = "a.b" })))
	if n := counted(ReasonBadClusterName) - badName; n != 1 {
		t.Errorf("a new problem counted %v times", n)
	}
	testkit.Must(t, services.Update(mirrorService("foo-west", nil)))
	if g := gauge() - startGauge; g != 0 {
		t.Errorf("fixed, objects with problems: %v", g)
	}

	// Broken again: reported again; then gone from a relist: forgotten.
	testkit.Must(t, services.Update(unlabelled("9")))
	if n := counted(ReasonNoClusterLabel) - noLabel; n != 2 {
		t.Errorf("broken again: counted %v times in all", n)
	}
	testkit.Must(t, services.Replace(nil, "10"))
	if g := gauge() - startGauge; g != 0 {
		t.Errorf("relisted without it, objects with problems: %v", g)
	}
	// And a deleted one too.
	testkit.Must(t, services.Update(unlabelled("11")))
	testkit.Must(t, services.Delete(unlabelled("11")))
	if g := gauge() - startGauge; g != 0 {
		t.Errorf("deleted, objects with problems: %v", g)
	}
}

// An updated slice keeps its place in its Service's list, which the index matches a member's
// slices by; a slice moved to another Service, or gone and back, does not.
func TestSliceUpdateKeepsItsPlace(t *testing.T) {
	w, err := New(fake.NewClientset(), []string{"db"}, DefaultExportSelector) // never run
	if err != nil {
		t.Fatal(err)
	}
	services, _, mirrorSlices := stores(w, "db")
	testkit.Must(t, services.Add(mirrorService("foo-west", nil)))
	for i := range 5 {
		testkit.Must(t, mirrorSlices.Add(mirrorSlice(fmt.Sprintf("foo-west-%d", i), "foo-west", fmt.Sprintf("10.96.0.%d", i))))
	}
	m := w.Members(index.Key{Namespace: "db", Name: "foo"})[0]
	addrs := func() []string {
		var out []string
		for _, sl := range w.Slices(m) {
			out = append(out, sl.Endpoints[0].Addr().String())
		}
		return out
	}
	before := addrs()
	for _, i := range []int{1, 0, 4} { // one of more, the first (kept apart), the last
		testkit.Must(t, mirrorSlices.Update(mirrorSlice(fmt.Sprintf("foo-west-%d", i), "foo-west", fmt.Sprintf("10.96.1.%d", i))))
		at := slices.Index(before, fmt.Sprintf("10.96.0.%d", i))
		before[at] = fmt.Sprintf("10.96.1.%d", i)
		if got := addrs(); !slices.Equal(got, before) {
			t.Fatalf("slice %d updated: %v, want %v", i, got, before)
		}
	}
	// Moved to another Service: gone from this one's list.
	testkit.Must(t, mirrorSlices.Update(mirrorSlice("foo-west-2", "bar-west", "10.96.1.2")))
	if got := addrs(); len(got) != 4 || slices.Contains(got, "10.96.0.2") {
		t.Fatalf("slice moved away: %v", got)
	}
	// The first one deleted: another takes its place, and is listed once.
	testkit.Must(t, mirrorSlices.Delete(mirrorSlice("foo-west-0", "foo-west", "10.96.1.0")))
	got := addrs()
	slices.Sort(got)
	if want := []string{"10.96.0.3", "10.96.1.1", "10.96.1.4"}; !slices.Equal(got, want) {
		t.Fatalf("first slice deleted: %v, want %v", got, want)
	}
}
