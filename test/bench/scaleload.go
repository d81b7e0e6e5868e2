package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/globaldns/global/test/harness"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// clearScale deletes namespace ns, a scale point's, and waits until it is gone: its slices first,
// then its Services (the other way round, each deleted Service would have kube-controller-manager
// list the slices left, as on creation; see loadScale), in parallel, then the namespace.
func clearScale(ctx context.Context, c kubernetes.Interface, ns string) error {
	slices, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if err := deleteEach(ctx, slices.Items, c.DiscoveryV1().EndpointSlices(ns).Delete); err != nil {
		return fmt.Errorf("delete slices: %w", err)
	}
	services, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if err := deleteEach(ctx, services.Items, c.CoreV1().Services(ns).Delete); err != nil {
		return fmt.Errorf("delete Services: %w", err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		_, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("namespace %s not deleted: %w", ns, ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// loadPhase is one phase of a load: how many objects of one kind it created, in how long.
type loadPhase struct {
	what      string
	objects   int
	took      time.Duration
	clusterIP bool // ClusterIP Services
}

func (p loadPhase) rate() float64 { return float64(p.objects) / p.took.Seconds() }

func phaseRates(ps []loadPhase) string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%d %s in %v, %.0f/s", p.objects, p.what, p.took.Round(time.Second), p.rate()))
	}
	return strings.Join(out, "; ")
}

// loadWorkers is how many creates are in flight: kube-apiserver, not the loader, is the limit
// (8, 32 and 64 load headless Services and slices at the same rate, within the noise).
const loadWorkers = 32

// loadScale creates n global services in namespace ns: a local selector-less headless Service and
// three headless mirrors, each with one EndpointSlice of three endpoints, as the mirroring
// controller would write them; with podMirrors, for each mirror record its per-pod mirror, whose
// ClusterIP is the record's address. Every Service comes before every slice: each selector-less
// Service makes kube-controller-manager's EndpointSliceMirroring controller list the slices of its
// namespace (looking for mirrored ones to delete, as the Service has no Endpoints), so a Service
// created after n slices costs it n label matches: with slices first, a load is quadratic in it.
func loadScale(ctx context.Context, cp *harness.ControlPlane, c kubernetes.Interface, ns string, n int, podMirrors bool) ([]loadPhase, error) {
	l := &loader{ctx: ctx, cp: cp, c: c, ns: ns, n: n, podMirrors: podMirrors, ips: make([][]string, n)}
	if podMirrors {
		if err := l.phase("ClusterIP Services (the per-pod mirrors)", n*(len(scaleClusters)-1)*scaleEndpoints, l.createPodMirrors); err != nil {
			return nil, err
		}
	}
	if err := l.phase("headless Services", n*len(scaleClusters), l.services); err != nil {
		return nil, err
	}
	slices := n * len(scaleClusters)
	if podMirrors {
		slices += n * (len(scaleClusters) - 1) * scaleEndpoints
	}
	if err := l.phase("EndpointSlices", slices, l.slices); err != nil {
		return nil, err
	}
	return l.phases, nil
}

// loader is one load of a scale point.
type loader struct {
	ctx        context.Context
	cp         *harness.ControlPlane
	c          kubernetes.Interface
	ns         string
	n          int // global services
	podMirrors bool
	ips        [][]string // per global service, its per-pod mirrors' ClusterIPs, by mirror and endpoint
	phases     []loadPhase
}

// phase creates objects objects, f(i) those of global service i, and records the phase.
func (l *loader) phase(what string, objects int, f func(i int) error) error {
	t0, cpu0 := time.Now(), l.cp.CPUTime()
	if err := parallel(l.ctx, l.n, f); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	p := loadPhase{what: what, objects: objects, took: time.Since(t0), clusterIP: strings.HasPrefix(what, "ClusterIP")}
	l.phases = append(l.phases, p)
	// Where the CPU went, in cores.
	var use []string
	for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager"} {
		use = append(use, fmt.Sprintf("%s %.2f", name, (l.cp.CPUTime()[name]-cpu0[name]).Seconds()/p.took.Seconds()))
	}
	fmt.Printf("  %d %s in %v, %.0f/s; cores used: %s\n", p.objects, p.what, p.took.Round(time.Second), p.rate(), strings.Join(use, ", "))
	return nil
}

// createPodMirrors creates global service i's per-pod mirrors, and keeps their ClusterIPs.
func (l *loader) createPodMirrors(i int) error {
	for ci := 1; ci < len(scaleClusters); ci++ {
		for e := range scaleEndpoints {
			svc, err := l.c.CoreV1().Services(l.ns).Create(l.ctx, scalePodMirror(i, ci, e), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			l.ips[i] = append(l.ips[i], svc.Spec.ClusterIP)
		}
	}
	return nil
}

// services creates global service i's headless Services: the local one and the mirrors.
func (l *loader) services(i int) error {
	for ci := range scaleClusters {
		if _, err := l.c.CoreV1().Services(l.ns).Create(l.ctx, scaleService(l.ns, i, ci), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// slices creates global service i's EndpointSlices: one per Service, and one per per-pod mirror.
func (l *loader) slices(i int) error {
	for ci := range scaleClusters {
		var addrs []string
		if ci > 0 && l.podMirrors {
			addrs = l.ips[i][(ci-1)*scaleEndpoints : ci*scaleEndpoints]
		}
		if _, err := l.c.DiscoveryV1().EndpointSlices(l.ns).Create(l.ctx, scaleSlice(l.ns, i, ci, addrs), metav1.CreateOptions{}); err != nil {
			return err
		}
		if ci == 0 || !l.podMirrors {
			continue
		}
		for e := range scaleEndpoints {
			if _, err := l.c.DiscoveryV1().EndpointSlices(l.ns).Create(l.ctx, scalePodMirrorSlice(i, ci, e), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteEach deletes every one of objs (a list's items: PT, their pointer, has GetName) with del,
// in parallel.
func deleteEach[T any, PT interface {
	*T
	GetName() string
}](ctx context.Context, objs []T, del func(context.Context, string, metav1.DeleteOptions) error) error {
	return parallel(ctx, len(objs), func(i int) error { return del(ctx, PT(&objs[i]).GetName(), metav1.DeleteOptions{}) })
}

// parallel calls f(0) to f(n-1) from loadWorkers goroutines, and returns the first error.
func parallel(ctx context.Context, n int, f func(int) error) error {
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		case <-ctx.Done():
			close(work)
			wg.Wait()
			return ctx.Err()
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

const scaleEndpoints = 3

// scaleNames are global service i's name and the name of its member ci (0: the local Service).
func scaleNames(i, ci int) (global, member string) {
	global = fmt.Sprintf("s%d", i)
	if ci == 0 {
		return global, global
	}
	return global, global + "-" + scaleClusters[ci]
}

// scaleLabels are the labels of member ci's Service, and of its slice.
func scaleLabels(ci int) map[string]string {
	if ci == 0 {
		return map[string]string{harness.LabelExported: "true"}
	}
	return map[string]string{harness.LabelMirroredService: "true", harness.LabelClusterName: scaleClusters[ci]}
}

// scaleService is member ci of global service i in ns: the local selector-less headless Service
// or a Linkerd headless mirror.
func scaleService(ns string, i, ci int) *corev1.Service {
	global, name := scaleNames(i, ci)
	var annotations map[string]string
	if ci > 0 {
		annotations = map[string]string{harness.AnnotationRemoteSvcFqName: global + "." + ns + ".svc.cluster.local"}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: scaleLabels(ci), Annotations: annotations},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}
}

// scaleAddr is pod e of global service i in the cluster of index ci of scaleClusters (0: the
// local one): the mirrors' addresses when there are no per-pod mirrors to take them from.
func scaleAddr(i, ci, e int) string {
	return fmt.Sprintf("10.%d.%d.%d", 200+ci*scaleEndpoints+e, i/256, i%256)
}

// scaleSlice is the EndpointSlice in ns of member ci of global service i, as the mirroring
// controller writes a mirror's, with the annotations Linkerd puts on the mirror's Endpoints (see
// harness.Mirror): its addresses are addrs (the per-pod mirrors' ClusterIPs), or made up when addrs
// is nil.
func scaleSlice(ns string, i, ci int, addrs []string) *discoveryv1.EndpointSlice {
	global, name := scaleNames(i, ci)
	labels := scaleLabels(ci)
	labels[discoveryv1.LabelServiceName], labels[discoveryv1.LabelManagedBy] = name, "bench"
	var annotations map[string]string
	if ci > 0 {
		annotations = map[string]string{
			harness.AnnotationRemoteSvcFqName:       global + "." + ns + ".svc.cluster.local",
			harness.AnnotationRemoteGatewayIdentity: harness.GatewayIdentity,
		}
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-x", Labels: labels, Annotations: annotations},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
	}
	for e := range scaleEndpoints {
		addr := scaleAddr(i, ci, e)
		if addrs != nil {
			addr = addrs[e]
		}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{addr},
			Hostname:   ptr.To(fmt.Sprintf("%s-%d", global, e)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return es
}

// scalePodMirror is the per-pod mirror of endpoint e of mirror ci of global service i, as Linkerd
// writes it (see harness.CreateMirror): a ClusterIP Service <host>-<cluster>.
func scalePodMirror(i, ci, e int) *corev1.Service {
	global, mirror := scaleNames(i, ci)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d-%s", global, e, scaleClusters[ci]), Labels: scalePodMirrorLabels(mirror, ci)},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}
}

func scalePodMirrorLabels(mirror string, ci int) map[string]string {
	return map[string]string{
		harness.LabelMirroredService: "true", harness.LabelClusterName: scaleClusters[ci],
		harness.LabelHeadlessMirrorSvcName: mirror,
	}
}

// scalePodMirrorSlice is the slice of scalePodMirror(i, ci, e), as the mirroring controller
// writes it: at the gateway, ready.
func scalePodMirrorSlice(i, ci, e int) *discoveryv1.EndpointSlice {
	global, mirror := scaleNames(i, ci)
	name := fmt.Sprintf("%s-%d-%s", global, e, scaleClusters[ci])
	labels := scalePodMirrorLabels(mirror, ci)
	labels[discoveryv1.LabelServiceName], labels[discoveryv1.LabelManagedBy] = name, "bench"
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-x", Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](harness.GatewayPort)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{harness.GatewayIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
}
