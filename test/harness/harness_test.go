package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/globaldns/global/test/testkit"
)

// TestControlPlane starts one control plane and runs every real-cluster
// check against it, to keep the package's test time small.
func TestControlPlane(t *testing.T) {
	begin := time.Now()
	cp := Start(t)
	t.Logf("control plane ready in %v (api %s)", time.Since(begin).Round(10*time.Millisecond), cp.APIServerURL())

	t.Run("StatefulSet", func(t *testing.T) { testStatefulSet(t, cp) })
	t.Run("Mirror", func(t *testing.T) { testMirror(t, cp) })
	t.Run("IPv6", func(t *testing.T) { testIPv6(t, cp) })
	t.Run("NegativeMirrors", func(t *testing.T) { testNegativeMirrors(t, cp) })
	t.Run("Kubeconfig", func(t *testing.T) { testKubeconfig(t, cp) })
	t.Run("CoreDNS", func(t *testing.T) { testCoreDNS(t, cp) })
	t.Run("CompactEtcd", func(t *testing.T) { testCompactEtcd(t, cp) })
}

// testCompactEtcd checks that compaction is real: etcd refuses a read at a revision from before
// it, and a watch from there, once kube-apiserver restarts, is refused as too old (an informer's
// cue to relist). (kube-apiserver's watch cache may still serve a list at that revision.)
func testCompactEtcd(t *testing.T, cp *ControlPlane) {
	ctx := timeout(t, 2*time.Minute)
	c := cp.Client.CoreV1().ConfigMaps("default")
	cm, err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "compacted"}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	old := cm.ResourceVersion
	cm.Data = map[string]string{"k": "v"}
	_, err = c.Update(ctx, cm, metav1.UpdateOptions{})
	testkit.Must(t, err)
	readAt := fmt.Sprintf(`{"key":"AA==","revision":"%s"}`, old)
	testkit.Must(t, cp.etcdCall(ctx, "/v3/kv/range", readAt, nil))
	rev, err := cp.CompactEtcd(ctx)
	testkit.Must(t, err)
	if err := cp.etcdCall(ctx, "/v3/kv/range", readAt, nil); err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Errorf("after compaction to %d, a read at %s: %v, want compacted", rev, old, err)
	}
	cp.StopAPIServer()
	testkit.Must(t, cp.StartAPIServer(ctx))
	w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: old})
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	testkit.Must(t, err)
	defer w.Stop()
	select {
	case e := <-w.ResultChan():
		if st, ok := e.Object.(*metav1.Status); !ok || st.Code != http.StatusGone {
			t.Errorf("a watch from %s after the restart: %s %v, want 410 Gone", old, e.Type, e.Object)
		}
	case <-ctx.Done():
		t.Error("a watch from before the compaction got no event")
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// must fails the test on err.
// endpointsByHost indexes the endpoints of slices by hostname.
func endpointsByHost(slices []discoveryv1.EndpointSlice) map[string]discoveryv1.Endpoint {
	m := map[string]discoveryv1.Endpoint{}
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Hostname != nil {
				m[*e.Hostname] = e
			}
		}
	}
	return m
}

func ready(e discoveryv1.Endpoint) bool { return e.Conditions.Ready != nil && *e.Conditions.Ready }

// readiness returns hostname -> ready for all endpoints with a hostname.
func readiness(slices []discoveryv1.EndpointSlice) map[string]bool {
	m := map[string]bool{}
	for h, e := range endpointsByHost(slices) {
		m[h] = ready(e)
	}
	return m
}

func sameReadiness(want map[string]bool) func([]discoveryv1.EndpointSlice) bool {
	return func(s []discoveryv1.EndpointSlice) bool {
		got := readiness(s)
		if len(got) != len(want) {
			return false
		}
		for h, r := range want {
			if g, ok := got[h]; !ok || g != r {
				return false
			}
		}
		return true
	}
}

func testStatefulSet(t *testing.T, cp *ControlPlane) {
	ctx := timeout(t, 30*time.Second)
	c := cp.Client
	testkit.Must(t, EnsureNamespace(ctx, c, "db"))
	testkit.Must(t, CreateNode(ctx, c, Node{Name: "node-a", Zone: "zone-a", Region: "region-1"}))
	testkit.Must(t, CreateStatefulSet(ctx, c, StatefulSet{
		Namespace: "db", Service: "foo",
		Ports: []Port{{Name: "pg", Port: 5432}},
		Pods: []Pod{
			{Name: "foo-0", Node: "node-a", IP: "10.1.0.10", Ready: true},
			{Name: "foo-1", Node: "node-a", IP: "10.1.0.11", Ready: true},
			{Name: "foo-2", Node: "node-a", IP: "10.1.0.12", Ready: false},
		},
	}))
	begin := time.Now()
	var got []discoveryv1.EndpointSlice
	testkit.Must(t, WaitForSlices(ctx, c, "db", "foo", func(s []discoveryv1.EndpointSlice) bool {
		got = s
		return sameReadiness(map[string]bool{"foo-0": true, "foo-1": true, "foo-2": false})(s)
	}))
	t.Logf("endpointslice controller published 3 pods in %v: %s", time.Since(begin).Round(time.Millisecond), DescribeSlices(got))

	if len(got) != 1 {
		t.Fatalf("want 1 slice, got %s", DescribeSlices(got))
	}
	s := got[0]
	if s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("address type %s, want IPv4", s.AddressType)
	}
	if m := s.Labels[discoveryv1.LabelManagedBy]; m != "endpointslice-controller.k8s.io" {
		t.Errorf("managed-by %q", m)
	}
	// The rest of the project relies on this: the endpointslice controller
	// copies the Service's labels onto its slices.
	if v := s.Labels[LabelExported]; v != "true" {
		t.Errorf("FACT CHECK FAILED: slice does not carry the Service label %s=true; labels %v", LabelExported, s.Labels)
	}
	if _, ok := s.Labels[corev1.IsHeadlessService]; !ok {
		t.Errorf("slice lacks %s label: %v", corev1.IsHeadlessService, s.Labels)
	}
	if len(s.Ports) != 1 || s.Ports[0].Port == nil || *s.Ports[0].Port != 5432 || s.Ports[0].Name == nil || *s.Ports[0].Name != "pg" {
		t.Errorf("ports %s", DescribeSlices(got))
	}
	for i, e := range endpointsByHost(got) {
		if e.NodeName == nil || *e.NodeName != "node-a" {
			t.Errorf("%s: nodeName %v", i, e.NodeName)
		}
		if e.Zone == nil || *e.Zone != "zone-a" {
			t.Errorf("%s: zone %v", i, e.Zone)
		}
		if e.TargetRef == nil || e.TargetRef.Kind != "Pod" || e.TargetRef.Name != i {
			t.Errorf("%s: targetRef %+v", i, e.TargetRef)
		}
		wantIP := "10.1.0.1" + i[len(i)-1:]
		if !slices.Equal(e.Addresses, []string{wantIP}) {
			t.Errorf("%s: addresses %v, want %s", i, e.Addresses, wantIP)
		}
	}

	testkit.Must(t, SetPodReady(ctx, c, "db", "foo-2", true))
	testkit.Must(t, WaitForSlices(ctx, c, "db", "foo", sameReadiness(map[string]bool{"foo-0": true, "foo-1": true, "foo-2": true})))
	testkit.Must(t, SetPodReady(ctx, c, "db", "foo-0", false))
	testkit.Must(t, WaitForSlices(ctx, c, "db", "foo", sameReadiness(map[string]bool{"foo-0": false, "foo-1": true, "foo-2": true})))
}

func testMirror(t *testing.T, cp *ControlPlane) {
	ctx := timeout(t, 30*time.Second)
	c := cp.Client
	testkit.Must(t, EnsureNamespace(ctx, c, "db"))
	m := Mirror{
		Namespace: "db", Service: "foo", Cluster: "target1",
		Ports:     []Port{{Name: "pg", Port: 5432, TargetPort: 15432}},
		Endpoints: []RemoteEndpoint{{Hostname: "foo-0", Ready: true}, {Hostname: "foo-1", Ready: false}},
		Labels:    map[string]string{"app": "foo", LabelExported: "true"},
	}
	objs, err := CreateMirror(ctx, c, m)
	testkit.Must(t, err)
	// Linkerd mirrors only ready remote pods: foo-1 has no per-pod mirror.
	if objs.Service != "foo-target1" || objs.PodServices["foo-0"] != "foo-0-target1" || len(objs.ClusterIPs) != 1 {
		t.Fatalf("objects %+v", objs)
	}

	svc, err := c.CoreV1().Services("db").Get(ctx, "foo-target1", metav1.GetOptions{})
	testkit.Must(t, err)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector != nil || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 5432 || svc.Spec.Ports[0].TargetPort.IntVal != 15432 ||
		svc.Labels["app"] != "foo" || svc.Labels[LabelClusterName] != "target1" ||
		svc.Annotations[AnnotationRemoteSvcFqName] != "foo.db.svc.cluster.local" || svc.Annotations[AnnotationRemoteResourceVersion] == "" {
		t.Errorf("headless mirror service: %+v", svc)
	}
	ep, err := c.CoreV1().Endpoints("db").Get(ctx, "foo-target1", metav1.GetOptions{})
	testkit.Must(t, err)
	if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || len(ep.Subsets[0].NotReadyAddresses) != 0 ||
		ep.Subsets[0].Addresses[0].Hostname != "foo-0" || ep.Subsets[0].Addresses[0].IP != objs.ClusterIPs["foo-0"] ||
		ep.Subsets[0].Ports[0].Port != 15432 || ep.Annotations[AnnotationRemoteGatewayIdentity] == "" {
		t.Errorf("headless mirror endpoints: %+v", ep)
	}

	begin := time.Now()
	var got []discoveryv1.EndpointSlice
	testkit.Must(t, WaitForSlices(ctx, c, "db", "foo-target1", func(s []discoveryv1.EndpointSlice) bool {
		got = s
		return sameReadiness(map[string]bool{"foo-0": true})(s)
	}))
	t.Logf("mirroring controller published the headless mirror in %v: %s", time.Since(begin).Round(time.Millisecond), DescribeSlices(got))
	if len(got) != 1 {
		t.Fatalf("want 1 slice, got %s", DescribeSlices(got))
	}
	s := got[0]
	if s.GenerateName != "foo-target1-" {
		t.Errorf("generateName %q", s.GenerateName)
	}
	if v := s.Labels[discoveryv1.LabelManagedBy]; v != "endpointslicemirroring-controller.k8s.io" {
		t.Errorf("managed-by %q", v)
	}
	// The rest of the project relies on these: the mirroring controller
	// copies the Endpoints' labels onto the slices.
	for k, want := range map[string]string{LabelMirroredService: "true", LabelClusterName: "target1", "app": "foo"} {
		if v, ok := s.Labels[k]; !ok || v != want {
			t.Errorf("FACT CHECK FAILED: mirrored slice label %s=%q (present %t), want %q; labels %v", k, v, ok, want, s.Labels)
		}
	}
	if _, ok := s.Labels[LabelExported]; ok {
		t.Errorf("Linkerd does not copy mirror.linkerd.io/* labels, but the slice has %s", LabelExported)
	}
	// And the Endpoints' annotations, which Linkerd's destination reads from the slices.
	for k, want := range map[string]string{AnnotationRemoteSvcFqName: "foo.db.svc.cluster.local", AnnotationRemoteGatewayIdentity: GatewayIdentity} {
		if v := s.Annotations[k]; v != want {
			t.Errorf("FACT CHECK FAILED: mirrored slice annotation %s=%q, want %q (annotations %v)", k, v, want, s.Annotations)
		}
	}
	if len(s.Ports) != 1 || *s.Ports[0].Port != 15432 || *s.Ports[0].Name != "pg" {
		t.Errorf("want target port pg:15432, got %s", DescribeSlices(got))
	}
	for h, e := range endpointsByHost(got) {
		if !slices.Equal(e.Addresses, []string{objs.ClusterIPs[h]}) {
			t.Errorf("%s: addresses %v, want per-pod ClusterIP %s", h, e.Addresses, objs.ClusterIPs[h])
		}
		if e.Zone != nil || e.NodeName != nil {
			t.Errorf("%s: mirrored endpoint has zone %v / nodeName %v", h, e.Zone, e.NodeName)
		}
	}
	// The per-pod mirrors get slices of their own (to the gateway), which
	// carry headless-mirror-svc-name: consumers must exclude them.
	testkit.Must(t, WaitForSlices(ctx, c, "db", "foo-0-target1", func(s []discoveryv1.EndpointSlice) bool {
		return len(s) == 1 && s[0].Labels[LabelHeadlessMirrorSvcName] == "foo-target1" &&
			len(s[0].Endpoints) == 1 && s[0].Endpoints[0].Addresses[0] == GatewayIP
	}))

	// The gateway dies: the per-pod mirrors' slices turn not ready, the
	// headless mirror's stay ready; then it comes back.
	for _, alive := range []bool{false, true} {
		n, err := SetGateway(ctx, c, "target1", alive)
		testkit.Must(t, err)
		if n != 1 {
			t.Errorf("SetGateway(%t) rewrote %d Endpoints, want the one per-pod mirror", alive, n)
		}
		testkit.Must(t, WaitForSlices(ctx, c, "db", "foo-0-target1", func(s []discoveryv1.EndpointSlice) bool {
			return len(s) == 1 && len(s[0].Endpoints) == 1 && *s[0].Endpoints[0].Conditions.Ready == alive
		}))
		testkit.Must(t, WaitForSlices(ctx, c, "db", "foo-target1", sameReadiness(map[string]bool{"foo-0": true})))
	}

	// foo-1 becomes ready, foo-2 appears.
	m.Endpoints = []RemoteEndpoint{{Hostname: "foo-0", Ready: true}, {Hostname: "foo-1", Ready: true}, {Hostname: "foo-2", Ready: true}}
	objs, err = UpdateMirror(ctx, c, m)
	testkit.Must(t, err)
	testkit.Must(t, WaitForSlices(ctx, c, "db", "foo-target1", sameReadiness(map[string]bool{"foo-0": true, "foo-1": true, "foo-2": true})))
	// foo-0 goes away: its per-pod Service goes too.
	m.Endpoints = m.Endpoints[1:]
	objs, err = UpdateMirror(ctx, c, m)
	testkit.Must(t, err)
	testkit.Must(t, WaitForSlices(ctx, c, "db", "foo-target1", sameReadiness(map[string]bool{"foo-1": true, "foo-2": true})))
	if _, err := c.CoreV1().Services("db").Get(ctx, "foo-0-target1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("per-pod service foo-0-target1 after removal: %v", err)
	}
	if len(objs.PodServices) != 2 {
		t.Errorf("objects after update %+v", objs)
	}

	testkit.Must(t, DeleteMirror(ctx, c, "db", "foo", "target1"))
	for _, svc := range []string{"foo-target1", "foo-1-target1", "foo-2-target1"} {
		testkit.Must(t, WaitForSlices(ctx, c, "db", svc, func(s []discoveryv1.EndpointSlice) bool { return len(s) == 0 }))
	}
	svcs, err := c.CoreV1().Services("db").List(ctx, metav1.ListOptions{LabelSelector: LabelClusterName + "=target1"})
	testkit.Must(t, err)
	if len(svcs.Items) != 0 {
		t.Errorf("%d mirror services left after DeleteMirror", len(svcs.Items))
	}
}

func testIPv6(t *testing.T, cp *ControlPlane) {
	ctx := timeout(t, 30*time.Second)
	c := cp.Client
	testkit.Must(t, EnsureNamespace(ctx, c, "v6"))
	testkit.Must(t, CreateNode(ctx, c, Node{Name: "node-b", Zone: "zone-b", Region: "region-1"}))
	pods := func(prefix string) []Pod {
		return []Pod{
			{Name: prefix + "-0", Node: "node-b", IP: "10.2.0.10", IPv6: "fd00:2::10", Ready: true},
			{Name: prefix + "-1", Node: "node-b", IP: "10.2.0.11", IPv6: "fd00:2::11", Ready: false},
		}
	}
	byType := func(s []discoveryv1.EndpointSlice) map[discoveryv1.AddressType][]string {
		m := map[discoveryv1.AddressType][]string{}
		for _, sl := range s {
			for _, e := range sl.Endpoints {
				m[sl.AddressType] = append(m[sl.AddressType], e.Addresses...)
			}
		}
		for _, v := range m {
			slices.Sort(v)
		}
		return m
	}

	// Dual-stack StatefulSet: one slice per family.
	testkit.Must(t, CreateStatefulSet(ctx, c, StatefulSet{
		Namespace: "v6", Service: "dual", Ports: []Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Pods: pods("dual"), IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
	}))
	var got []discoveryv1.EndpointSlice
	testkit.Must(t, WaitForSlices(ctx, c, "v6", "dual", func(s []discoveryv1.EndpointSlice) bool {
		got = s
		m := byType(s)
		return slices.Equal(m[discoveryv1.AddressTypeIPv4], []string{"10.2.0.10", "10.2.0.11"}) &&
			slices.Equal(m[discoveryv1.AddressTypeIPv6], []string{"fd00:2::10", "fd00:2::11"})
	}))
	t.Logf("dual-stack StatefulSet: %s", DescribeSlices(got))
	for _, s := range got {
		if s.AddressType == discoveryv1.AddressTypeIPv6 && !sameReadiness(map[string]bool{"dual-0": true, "dual-1": false})([]discoveryv1.EndpointSlice{s}) {
			t.Errorf("IPv6 slice readiness: %s", DescribeSlices(got))
		}
	}

	// IPv6 single-stack StatefulSet: IPv6 slices only.
	testkit.Must(t, CreateStatefulSet(ctx, c, StatefulSet{
		Namespace: "v6", Service: "six", Ports: []Port{{Name: "http", Port: 80}},
		Pods: pods("six"), IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol},
	}))
	testkit.Must(t, WaitForSlices(ctx, c, "v6", "six", func(s []discoveryv1.EndpointSlice) bool {
		got = s
		m := byType(s)
		return len(m) == 1 && slices.Equal(m[discoveryv1.AddressTypeIPv6], []string{"fd00:2::10", "fd00:2::11"})
	}))

	// IPv6 mirror: per-pod ClusterIPs are IPv6, so the mirrored slice is IPv6.
	m := Mirror{
		Namespace: "v6", Service: "six", Cluster: "west", IPv6: true,
		Ports:     []Port{{Name: "http", Port: 80, TargetPort: 8080}},
		Endpoints: []RemoteEndpoint{{Hostname: "six-0", Ready: true}, {Hostname: "six-1", Ready: true}},
	}
	objs, err := CreateMirror(ctx, c, m)
	testkit.Must(t, err)
	for h, ip := range objs.ClusterIPs {
		if a := net.ParseIP(ip); a == nil || a.To4() != nil {
			t.Fatalf("%s: per-pod ClusterIP %q is not IPv6", h, ip)
		}
	}
	testkit.Must(t, WaitForSlices(ctx, c, "v6", "six-west", func(s []discoveryv1.EndpointSlice) bool {
		got = s
		return len(s) == 1 && s[0].AddressType == discoveryv1.AddressTypeIPv6 &&
			sameReadiness(map[string]bool{"six-0": true, "six-1": true})(s)
	}))
	t.Logf("IPv6 mirror: %s", DescribeSlices(got))
	// six-1 turns not ready there while the service mirror holds the gateway down: six-1 leaves
	// the headless mirror, and six-0 is rewritten into its notReadyAddresses.
	m.Endpoints[1].Ready, m.GatewayDown = false, true
	objs, err = UpdateMirror(ctx, c, m)
	testkit.Must(t, err)
	testkit.Must(t, WaitForSlices(ctx, c, "v6", "six-west", func(s []discoveryv1.EndpointSlice) bool {
		got = s
		return len(s) == 1 && s[0].AddressType == discoveryv1.AddressTypeIPv6 && sameReadiness(map[string]bool{"six-0": false})(s)
	}))
	if _, ok := objs.PodServices["six-1"]; ok {
		t.Errorf("six-1 kept its per-pod mirror: %+v", objs)
	}
	t.Logf("IPv6 mirror rewritten with the gateway down: %s", DescribeSlices(got))
	testkit.Must(t, DeleteMirror(ctx, c, "v6", "six", "west"))
}

func testNegativeMirrors(t *testing.T, cp *ControlPlane) {
	ctx := timeout(t, 30*time.Second)
	c := cp.Client
	testkit.Must(t, EnsureNamespace(ctx, c, "web"))
	ports := []Port{{Name: "http", Port: 80, TargetPort: 8080}}
	testkit.Must(t, CreateClusterIPMirror(ctx, c, "web", "web", "target1", ports))
	testkit.Must(t, CreateRemoteDiscoveryMirror(ctx, c, "web", "api", "target1", ports))
	svc, err := c.CoreV1().Services("web").Get(ctx, "web-target1", metav1.GetOptions{})
	testkit.Must(t, err)
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Errorf("clusterIP mirror has clusterIP %q", svc.Spec.ClusterIP)
	}
	testkit.Must(t, WaitForSlices(ctx, c, "web", "web-target1", func(s []discoveryv1.EndpointSlice) bool {
		return len(s) == 1 && len(s[0].Endpoints) == 1 && s[0].Endpoints[0].Addresses[0] == GatewayIP &&
			*s[0].Ports[0].Port == GatewayPort
	}))
	// A dead gateway marks ClusterIP mirrors not ready too; remote-discovery mirrors have no Endpoints.
	n, err := SetGateway(ctx, c, "target1", false)
	testkit.Must(t, err)
	if n != 1 {
		t.Errorf("SetGateway rewrote %d Endpoints, want web-target1's alone", n)
	}
	testkit.Must(t, WaitForSlices(ctx, c, "web", "web-target1", func(s []discoveryv1.EndpointSlice) bool {
		return len(s) == 1 && len(s[0].Endpoints) == 1 && !*s[0].Endpoints[0].Conditions.Ready
	}))
	rd, err := c.CoreV1().Services("web").Get(ctx, "api-target1", metav1.GetOptions{})
	testkit.Must(t, err)
	if rd.Labels[LabelRemoteDiscovery] != "target1" || rd.Labels[LabelRemoteService] != "api" {
		t.Errorf("remote-discovery labels %v", rd.Labels)
	}
	if _, err := c.CoreV1().Endpoints("web").Get(ctx, "api-target1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("remote-discovery mirror has Endpoints: %v", err)
	}
}

func testKubeconfig(t *testing.T, cp *ControlPlane) {
	ctx := timeout(t, 10*time.Second)
	for _, tc := range []struct {
		token string
		ok    bool
	}{{cp.adminToken, true}, {"not-a-token", false}} {
		path, err := cp.KubeconfigFor(tc.token)
		testkit.Must(t, err)
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		testkit.Must(t, err)
		c, err := kubernetes.NewForConfig(cfg)
		testkit.Must(t, err)
		_, err = c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if tc.ok && err != nil {
			t.Errorf("admin token via %s: %v", path, err)
		}
		if !tc.ok && !apierrors.IsUnauthorized(err) {
			t.Errorf("unknown token: want 401, got %v", err)
		}
	}
}

func testCoreDNS(t *testing.T, cp *ControlPlane) {
	ctx := timeout(t, 30*time.Second)
	testkit.Must(t, EnsureNamespace(ctx, cp.Client, "dnstest"))
	testkit.Must(t, CreateNode(ctx, cp.Client, Node{Name: "node-dns", Zone: "zone-a"}))
	testkit.Must(t, CreateStatefulSet(ctx, cp.Client, StatefulSet{
		Namespace: "dnstest", Service: "pg", Ports: []Port{{Name: "pg", Port: 5432}},
		Pods: []Pod{{Name: "pg-0", Node: "node-dns", IP: "10.3.0.10", Ready: true}},
	}))
	testkit.Must(t, WaitForSlices(ctx, cp.Client, "dnstest", "pg", func(s []discoveryv1.EndpointSlice) bool { return len(readiness(s)) == 1 }))

	begin := time.Now()
	c := StartCoreDNS(t, cp, `.:{{.Port}} {
	health {{.Health}}
	ready {{.Ready}}
	prometheus {{.Metrics}}
	kubernetes cluster.local {
		kubeconfig {{.Kubeconfig}}
	}
}
`)
	t.Logf("coredns serving in %v at %s (health %s, ready %s, metrics %s)", time.Since(begin).Round(time.Millisecond), c.Addr, c.HealthAddr, c.ReadyAddr, c.MetricsAddr)
	for _, proto := range []string{"udp", "tcp"} {
		r := c.Exchange(t, new(dns.Msg).SetQuestion("pg-0.pg.dnstest.svc.cluster.local.", dns.TypeA), proto)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.3.0.10" {
			t.Errorf("%s: pg-0 A: %v", proto, r)
		}
	}
	for _, addr := range []string{"http://" + c.HealthAddr + "/health", "http://" + c.MetricsAddr + "/metrics"} {
		resp, err := http.Get(addr)
		testkit.Must(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", addr, resp.Status)
		}
	}
	if !strings.Contains(c.Logs(), "CoreDNS-") {
		t.Errorf("coredns log lacks the banner:\n%s", c.Logs())
	}
	c.Stop()
	c.Stop() // idempotent

	// The demo's variant reads the addresses from a rendered Corefile.
	ports, err := freePorts(2)
	testkit.Must(t, err)
	corefile := fmt.Sprintf(".:%d {\n\tready 127.0.0.1:%d\n\twhoami\n}\n", ports[0], ports[1])
	p, err := StartCoreDNSProcess(corefile, t.TempDir(), nil)
	testkit.Must(t, err)
	defer p.Stop()
	if p.Addr != "127.0.0.1:"+strconv.Itoa(ports[0]) || p.ReadyAddr != "127.0.0.1:"+strconv.Itoa(ports[1]) {
		t.Errorf("parsed addresses %q %q from %q", p.Addr, p.ReadyAddr, corefile)
	}
	r := p.Exchange(t, new(dns.Msg).SetQuestion("example.org.", dns.TypeA), "udp")
	if len(r.Extra) == 0 {
		t.Errorf("whoami answered %v", r)
	}
	p.Kill()

	// A broken Corefile fails fast, with coredns's own complaint.
	rec := &fatalRecorder{TB: t}
	begin = time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartCoreDNS(rec, cp, ".:{{.Port}} {\n\tno-such-plugin\n}\n")
	}()
	<-done
	if !strings.Contains(rec.fatal, "exited early") || !strings.Contains(rec.fatal, "no-such-plugin") || time.Since(begin) > 10*time.Second {
		t.Errorf("broken Corefile: after %v got fatal %q", time.Since(begin), rec.fatal)
	}
}

func TestParseCorefileAddrs(t *testing.T) {
	got := parseCorefileAddrs(`# comment {
global.:1053 local:1053 {
    health :9080 {
        lameduck 5s
    }
    ready
    prometheus 127.0.0.2:9253
    kubernetes cluster.local {
        ready 1.2.3.4:1
    }
}
.:1054 {
    health 127.0.0.1:1
}
`)
	want := corefileAddrs{dns: "127.0.0.1:1053", health: "127.0.0.1:9080", ready: "127.0.0.1:8181", metrics: "127.0.0.2:9253"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// fatalRecorder is a testing.TB whose Fatalf/Skip end the goroutine and
// record what happened, to test Start's failure path.
type fatalRecorder struct {
	testing.TB
	fatal, skipped string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalRecorder) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalRecorder) SkipNow()         { f.Skipf("SkipNow") }
func (f *fatalRecorder) Skip(args ...any) { f.Skipf("%s", fmt.Sprint(args...)) }

func TestStartFailsWithoutBinaries(t *testing.T) {
	for name, dir := range map[string]string{"unset": "", "empty dir": t.TempDir()} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(EnvControlPlaneBin, dir)
			rec := &fatalRecorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Start(rec)
				t.Error("Start returned without binaries")
			}()
			<-done
			if rec.skipped != "" || !strings.Contains(rec.fatal, "make controlplane") {
				t.Errorf("want a fatal error naming `make controlplane`, got fatal %q, skip %q", rec.fatal, rec.skipped)
			}
		})
	}
}
