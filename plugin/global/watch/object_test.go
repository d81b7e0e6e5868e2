package watch

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func mirrorService(name string, mutate func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   "db",
			Name:        name,
			Labels:      map[string]string{LabelMirroredService: "true", LabelClusterName: "west"},
			Annotations: map[string]string{AnnotationRemoteFQName: "foo.db.svc.cluster.local"},
		},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func TestMirrorMember(t *testing.T) {
	foo := index.Key{Namespace: "db", Name: "foo"}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		want    index.Key // zero: not a member
		cluster string
		reasons []string
	}{
		{"headless mirror", mirrorService("foo-west", nil), foo, "west", nil},
		// The annotation, not the name, says what the original is: foo-bar-west is foo from bar-west.
		{"ambiguous name", mirrorService("foo-bar-west", func(s *corev1.Service) {
			s.Labels[LabelClusterName] = "bar-west"
		}), foo, "bar-west", nil},
		{"no annotation", mirrorService("foo-west", func(s *corev1.Service) { delete(s.Annotations, AnnotationRemoteFQName) }),
			foo, "west", []string{ReasonMirrorFallbackName}},
		{"no annotation, name without suffix", mirrorService("foo", func(s *corev1.Service) { delete(s.Annotations, AnnotationRemoteFQName) }),
			index.Key{}, "", []string{ReasonNoRemoteName}},
		{"capital cluster name", mirrorService("foo-west", func(s *corev1.Service) { s.Labels[LabelClusterName] = "West" }),
			foo, "west", nil},
		{"cluster name with dots", mirrorService("foo-west", func(s *corev1.Service) { s.Labels[LabelClusterName] = "west.eu" }),
			index.Key{}, "", []string{ReasonBadClusterName}},
		{"no cluster label", mirrorService("foo-west", func(s *corev1.Service) { delete(s.Labels, LabelClusterName) }),
			index.Key{}, "", []string{ReasonNoClusterLabel}},
		{"bad annotation", mirrorService("foo-west", func(s *corev1.Service) { s.Annotations[AnnotationRemoteFQName] = "Foo_x.db" }),
			index.Key{}, "", []string{ReasonBadRemoteName}},
		// What Linkerd also writes, and which are never members.
		{"clusterIP mirror", mirrorService("web-west", func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.9" }), index.Key{}, "", nil},
		{"endpoint mirror", mirrorService("foo-0-west", func(s *corev1.Service) {
			s.Spec.ClusterIP = "10.96.0.10"
			s.Labels[LabelHeadlessMirror] = "foo-west"
		}), index.Key{}, "", nil},
		{"headless endpoint mirror label", mirrorService("foo-0-west", func(s *corev1.Service) { s.Labels[LabelHeadlessMirror] = "foo-west" }), index.Key{}, "", nil},
		{"gateway", mirrorService("probe-gateway-west", func(s *corev1.Service) { s.Labels[LabelMirroredGateway] = "true" }), index.Key{}, "", nil},
		{"remote discovery", mirrorService("foo-west", func(s *corev1.Service) { s.Labels[LabelRemoteDiscovery] = "west" }), index.Key{}, "", nil},
		{"federated", mirrorService("foo-federated", func(s *corev1.Service) { s.Annotations[LabelRemoteDiscovery] = "foo@west,foo@east" }), index.Key{}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := problems{}
			m, k := mirrorMember(tc.svc, &p)
			if k != tc.want || (m == nil) != (tc.want == index.Key{}) {
				t.Fatalf("got %v %+v, want %v", k, m, tc.want)
			}
			if m != nil && (m.Cluster != tc.cluster || m.Name != tc.svc.Name || !slices.Equal(m.Ports, []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}})) {
				t.Errorf("member %+v", m)
			}
			if !slices.Equal(p.reasons, tc.reasons) {
				t.Errorf("problems %v, want %v", p.reasons, tc.reasons)
			}
		})
	}
}

func TestLocalMember(t *testing.T) {
	local := mirrorService("foo", func(s *corev1.Service) { s.Labels = map[string]string{"mirror.linkerd.io/exported": "true"} })
	if m, k := localMember(local, &problems{}); m == nil || k != (index.Key{Namespace: "db", Name: "foo"}) || !m.Local() {
		t.Errorf("headless exported service: %+v %v", m, k)
	}
	local.Spec.ClusterIP = "10.96.0.1"
	if m, _ := localMember(local, &problems{}); m != nil {
		t.Error("a ClusterIP service is not a member")
	}
	if m, _ := localMember(mirrorService("foo-west", nil), &problems{}); m != nil {
		t.Error("a mirror seen by the export informer is not a local member")
	}
}

func TestConvertSlice(t *testing.T) {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "db", Name: "foo-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "foo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("db"), Port: ptr.To[int32](5432)},
			{Name: ptr.To("all"), Port: nil},
		},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Hostname: ptr.To("foo-0"), Zone: ptr.To("z1"), NodeName: ptr.To("n1"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "foo-0"}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}},
			{Addresses: []string{"10.0.0.3"}, Hostname: ptr.To("Not_A_Label")},
			{Addresses: []string{"fd00::1", "nonsense"}},
			{Addresses: []string{"::ffff:10.0.0.9"}},
		},
	}
	p := problems{}
	s := convertSlice(es, false, &p)
	if s == nil || s.Family != index.IPv4 || !slices.Equal(s.Ports, []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}) {
		t.Fatalf("slice %+v", s)
	}
	want := []index.Endpoint{
		{Host: "foo-0", Ready: true, Serving: true, Local: &index.Placement{Zone: "z1", NodeName: "n1", Pod: "foo-0"}},
		{Host: "10-0-0-2", Ready: false, Serving: false, Terminating: true},
		{Host: "10-0-0-3", Ready: true, Serving: true},
	}
	for i, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		want[i].SetAddr(netip.MustParseAddr(a))
	}
	if len(s.Endpoints) != len(want) {
		t.Fatalf("endpoints %+v", s.Endpoints)
	}
	for i := range want {
		if g, w := s.Endpoints[i], want[i]; !reflect.DeepEqual(g, w) {
			t.Errorf("endpoint %d:\n got %+v %+v\nwant %+v %+v", i, g, g.Local, w, w.Local)
		}
	}
	wantReasons := []string{ReasonPortWithoutNumber, ReasonBadHostname, ReasonBadAddress, ReasonBadAddress, ReasonBadAddress}
	if !slices.Equal(p.reasons, wantReasons) {
		t.Errorf("problems %v, want %v", p.reasons, wantReasons)
	}

	// A mirror's endpoints without a hostname are not pods: left out, counted.
	p = problems{}
	if m := convertSlice(es, true, &p); len(m.Endpoints) != 1 || m.Endpoints[0].Host != "foo-0" || m.Unnamed != 2 {
		t.Errorf("mirror slice: %d endpoints (%+v), %d unnamed, want foo-0 and 2", len(m.Endpoints), m.Endpoints, m.Unnamed)
	}

	es.AddressType = discoveryv1.AddressTypeFQDN
	p = problems{}
	if s := convertSlice(es, false, &p); s != nil || !slices.Equal(p.reasons, []string{ReasonFQDNSlice}) {
		t.Errorf("FQDN slice: %+v %v", s, p.reasons)
	}
}

func TestDashed(t *testing.T) {
	for in, want := range map[string]string{"10.244.1.5": "10-244-1-5", "fd00::1": "fd00--1", "fd00::": "fd00--0", "::1": "0--1"} {
		if got := dashed(netip.MustParseAddr(in)); got != want {
			t.Errorf("dashed(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestTransformIsIdempotentAndNeverFails(t *testing.T) {
	tr := transform(fromMirror, nil)
	obj, err := tr(mirrorService("foo-west", nil))
	if err != nil {
		t.Fatal(err)
	}
	again, err := tr(obj)
	if err != nil || again != obj {
		t.Errorf("second transform: %v %v", again, err)
	}
	if s := obj.(*service); s.member == nil || s.name != "foo-west" || s.namespace != "db" {
		t.Errorf("converted %+v", s)
	}
	bad, err := tr(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	if err != nil || bad.(*slice).slice != nil {
		t.Errorf("slice without service label: %+v %v", bad, err)
	}
}

// What Linkerd's destination reads beside endpoints is kept: a Service's opaque ports (local or
// mirror), a headless mirror slice's gateway identity and remote name; nothing else, and nothing of
// a local slice. Equal lists are one copy.
func TestKeptAnnotations(t *testing.T) {
	local := transform(fromLocal, nil)
	mirror := transform(fromMirror, nil)
	annotated := func(s *corev1.Service) {
		s.Annotations["config.linkerd.io/opaque-ports"] = "5432"
		s.Annotations["example.com/team"] = "db"
	}
	for name, obj := range map[string]any{
		"local":  mirrorService("foo", func(s *corev1.Service) { annotated(s); s.Labels = nil }),
		"mirror": mirrorService("foo-west", annotated),
	} {
		tr := mirror
		if name == "local" {
			tr = local
		}
		o, _ := tr(obj)
		if m := o.(*service).member; m == nil || m.Settings == nil || !slices.Equal(m.Settings.Annotations, index.Annotations{{Key: "config.linkerd.io/opaque-ports", Value: "5432"}}) {
			t.Errorf("%s Service: member %+v", name, m)
		}
	}

	sliceOf := func(annotations map[string]string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "foo-west-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "foo-west"},
				Annotations: annotations},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.96.0.1"}, Hostname: ptr.To("foo-0")}},
		}
	}
	linkerd := map[string]string{
		index.AnnotationRemoteFQName:                       "foo.db.svc.cluster.local",
		index.AnnotationGatewayIdentity:                    "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local",
		"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-25T00:00:00Z",
	}
	// The remote name is kept relative to the global service's, foo.db: one copy for all a
	// Link's mirrors.
	want := index.Annotations{
		{Key: index.AnnotationGatewayIdentity, Value: linkerd[index.AnnotationGatewayIdentity]},
		{Key: index.AnnotationRemoteFQName, Value: "svc.cluster.local", Relative: true},
	}
	a, _ := mirror(sliceOf(maps.Clone(linkerd)))
	b, _ := mirror(sliceOf(maps.Clone(linkerd)))
	as, bs := a.(*slice).slice.Annotations, b.(*slice).slice.Annotations
	if as == nil || bs == nil || !slices.Equal(*as, want) || &(*as)[0] != &(*bs)[0] {
		t.Errorf("mirror slice annotations %v and %v, want %v, one copy", as, bs, want)
	}
	if got := as.Map(index.Key{Namespace: "db", Name: "foo"}); !maps.Equal(got, map[string]string{
		index.AnnotationGatewayIdentity: linkerd[index.AnnotationGatewayIdentity],
		index.AnnotationRemoteFQName:    linkerd[index.AnnotationRemoteFQName],
	}) {
		t.Errorf("written back as %v", got)
	}
	// A remote name of another namespace or service is kept whole.
	for _, fq := range []string{"foo.other.svc.cluster.local", "bar.db.svc.cluster.local", "foo"} {
		o, _ := mirror(sliceOf(map[string]string{index.AnnotationGatewayIdentity: "gw", index.AnnotationRemoteFQName: fq}))
		if got := *o.(*slice).slice.Annotations; got[1] != (index.Annotation{Key: index.AnnotationRemoteFQName, Value: fq}) {
			t.Errorf("%s kept as %+v", fq, got[1])
		}
	}
	if o, _ := local(sliceOf(maps.Clone(linkerd))); o.(*slice).slice.Annotations != nil {
		t.Errorf("a local slice keeps annotations: %v", o.(*slice).slice.Annotations)
	}

	// Without a gateway identity (a Link that names none), a problem, once.
	log := newProblemLog("EndpointSlice")
	tr := transform(fromMirror, log)
	before := testutil.ToFloat64(telemetry.Skipped.WithLabelValues(ReasonNoGatewayIdentity))
	for range 2 {
		o, _ := tr(sliceOf(map[string]string{index.AnnotationRemoteFQName: "foo.db.svc.cluster.local"}))
		if got := o.(*slice).slice.Annotations; got == nil || !slices.Equal(*got, want[1:]) {
			t.Errorf("annotations %v, want %v", got, want[1:])
		}
	}
	if n := testutil.ToFloat64(telemetry.Skipped.WithLabelValues(ReasonNoGatewayIdentity)) - before; n != 1 {
		t.Errorf("%v problems counted, want 1", n)
	}
}

// The owner's policy on a member Service is parsed once; a bad value is reported and ignored.
func TestMemberPolicy(t *testing.T) {
	for _, tc := range []struct {
		value  string // "" for no annotation
		want   string // "" for none
		reason string
	}{
		{"", "", ""},
		{"nearest 2", "nearest 2", ""},
		{"all", "all", ""},
		{"closest", "", ReasonBadPolicy},
		{"nearest 0", "", ReasonBadPolicy},
	} {
		for _, mirror := range []bool{false, true} {
			svc := mirrorService("foo-west", nil)
			if !mirror {
				svc = mirrorService("foo", func(s *corev1.Service) { s.Labels = nil })
			}
			if tc.value != "" {
				svc.Annotations[index.AnnotationPolicy] = tc.value
			}
			p := problems{}
			var m *index.Member
			if mirror {
				m, _ = mirrorMember(svc, &p)
			} else {
				m, _ = localMember(svc, &p)
			}
			got := ""
			if m.Settings != nil && m.Settings.Policy != nil {
				got = m.Settings.Policy.String()
			}
			if got != tc.want || (tc.reason == "") != (len(p.reasons) == 0) || (tc.reason != "" && p.reasons[0] != tc.reason) {
				t.Errorf("%q on a mirror %v: policy %q, problems %v; want %q, %q", tc.value, mirror, got, p.reasons, tc.want, tc.reason)
			}
		}
	}
}
