package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/globaldns/global/test/harness"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// The same objects, watched by the global plugin and by the kubernetes plugin, in turn.
const (
	scaleGlobal = `global:PORT {
    bind 127.0.0.1
    ready READY
    prometheus METRICS
    pprof PPROF
    global {
        kubeconfig KUBECONFIG
        namespaces NAMESPACE
        endpointslices off
        cluster east
        startup_timeout 5m
    }
}
`
	scaleKubernetes = `cluster.local:PORT {
    bind 127.0.0.1
    ready READY
    prometheus METRICS
    pprof PPROF
    kubernetes cluster.local {
        kubeconfig KUBECONFIG
        namespaces NAMESPACE
        startup_timeout 5m
    }
}
`
	scaleNS      = "scale"       // the point with per-pod mirrors
	scaleLargeNS = "scale-large" // the large point, without
)

var scaleClusters = []string{"", "west", "north", "south"} // "": the local Service

// scalePoint is one load the scale step measures: services global services in namespace ns, with
// or without Linkerd's per-pod mirrors.
type scalePoint struct {
	ns         string
	services   int
	podMirrors bool

	loaded  time.Duration
	settled time.Duration // from the end of the load until the control plane was idle
	phases  []loadPhase
	g, k    summary
	records int
	objects int // Services, and as many EndpointSlices
	perPod  int // of which per-pod mirrors (ClusterIP Services), and as many of the slices
}

// summary is one plugin's runs at one point: the median start-up, every run's, and the median
// heap and RSS.
type summary struct {
	ready      time.Duration
	runs       string
	cpu, cpCPU time.Duration // coredns's CPU time to ready, the control plane's meanwhile: medians
	heap, rss  float64
	perRecord  float64
}

func newScalePoint(ns string, services int, podMirrors bool) *scalePoint {
	p := &scalePoint{ns: ns, services: services, podMirrors: podMirrors}
	p.records = services * len(scaleClusters) * scaleEndpoints
	// Per global service: the local Service and each mirror, and a per-pod mirror per mirror record.
	p.objects = services * len(scaleClusters)
	if podMirrors {
		p.perPod = services * (len(scaleClusters) - 1) * scaleEndpoints
		p.objects += p.perPod
	}
	return p
}

func (p *scalePoint) name() string {
	if p.podMirrors {
		return fmt.Sprintf("%d global services, per-pod mirrors", p.services)
	}
	return fmt.Sprintf("%d global services, no per-pod mirrors", p.services)
}

func scale(ctx context.Context, cp *harness.ControlPlane, o options, r *report) error {
	c, err := loaderClient(cp.Config)
	if err != nil {
		return err
	}
	if err := harness.EnsureNamespace(ctx, c, "empty"); err != nil {
		return err
	}

	// start runs one plugin alone in a bin/coredns and measures it: ready = process start to
	// /ready 200 (polled every 10 ms); the heap after a full collection (what the caches hold, not
	// garbage).
	type result struct {
		ready      time.Duration
		cpu, cpCPU time.Duration // coredns's CPU time to ready, the control plane's meanwhile
		heap, rss  float64
	}
	runs := 0
	start := func(tmpl, ns, probe string, want int) (result, error) {
		// On an idle control plane, as a restart in a settled cluster finds it: after serving the
		// previous start's lists of 80,000 objects kube-apiserver stays busy for a second or two,
		// on the cores the next start needs (5 starts of global at 10,000 global services took
		// 0.93-1.36 s without this wait, 0.85-0.95 s with it).
		if err := settle(ctx, cp); err != nil {
			return result{}, err
		}
		ports := make([]string, 4)
		for i := range ports {
			var err error
			if ports[i], err = freePort(); err != nil {
				return result{}, err
			}
		}
		corefile := render(tmpl, "PORT", ports[0], "READY", "127.0.0.1:"+ports[1], "METRICS", "127.0.0.1:"+ports[2],
			"PPROF", "127.0.0.1:"+ports[3], "KUBECONFIG", cp.Kubeconfig, "NAMESPACE", ns)
		runs++
		// Its ports may have been an earlier process's: no connection to that one is reused.
		plainHTTP.CloseIdleConnections()
		t0, cp0 := time.Now(), controlPlaneCPU(cp)
		d, err := harness.StartCoreDNSProcess(corefile, filepath.Join(o.work, "coredns-scale-"+strconv.Itoa(runs)), nil, o.corednsEnv...)
		if err != nil {
			return result{}, err
		}
		defer d.Stop()
		r := result{ready: time.Since(t0), cpCPU: controlPlaneCPU(cp) - cp0}
		r.cpu, _ = d.CPUTime()
		// A failure says what coredns said last, before its directory goes with the run.
		failed := func(err error) (result, error) {
			return r, fmt.Errorf("%w; coredns exited: %v; its last lines:\n%s", err, d.Exited(), d.Tail(30))
		}
		if probe != "" {
			if n, _, err := count(d.Addr, probe, "tcp"); err != nil || n != want {
				return failed(fmt.Errorf("%s answers %d records, want %d (%v)", probe, n, want, err))
			}
		}
		heap := io.Discard
		if o.profiles != "" {
			f, err := os.Create(filepath.Join(o.profiles, fmt.Sprintf("heap-%d.pb.gz", runs)))
			if err != nil {
				return r, err
			}
			defer f.Close()
			heap = f
		}
		err = save("http://127.0.0.1:"+ports[3]+"/debug/pprof/heap?gc=1", heap)
		m, merr := metrics(d.MetricsAddr)
		if err != nil || merr != nil {
			return failed(fmt.Errorf("%v %v", err, merr))
		}
		r.heap = m["go_memstats_heap_inuse_bytes"]
		r.rss, _ = d.RSS()
		return r, nil
	}
	summarize := func(rs []result, base result, records int) summary {
		var ready, cpu, cpCPU, heap, rss []float64
		var runs []string
		for _, r := range rs {
			ready, heap, rss = append(ready, r.ready.Seconds()), append(heap, r.heap), append(rss, r.rss)
			cpu, cpCPU = append(cpu, r.cpu.Seconds()), append(cpCPU, r.cpCPU.Seconds())
			runs = append(runs, r.ready.Round(time.Millisecond).String())
		}
		seconds := func(xs []float64) time.Duration { return time.Duration(quantile(xs, .5) * float64(time.Second)) }
		x := summary{ready: seconds(ready), runs: strings.Join(runs, ", "), cpu: seconds(cpu), cpCPU: seconds(cpCPU),
			heap: quantile(heap, .5), rss: quantile(rss, .5)}
		x.perRecord = (x.heap - base.heap) / float64(records)
		return x
	}

	// Baselines first, before any load: the kubernetes plugin watches every namespace whatever
	// its `namespaces` says.
	gEmpty, err := start(scaleGlobal, "empty", "", 0)
	if err != nil {
		return fmt.Errorf("global, before the load: %w", err)
	}
	kEmpty, err := start(scaleKubernetes, "empty", "", 0)
	if err != nil {
		return fmt.Errorf("kubernetes, before the load: %w", err)
	}

	// measure loads p, then starts each plugin o.rounds times, interleaved: start-up is reported
	// as the median and the spread.
	measure := func(p *scalePoint) error {
		if err := harness.EnsureNamespace(ctx, c, p.ns); err != nil {
			return err
		}
		t0 := time.Now()
		var err error
		if p.phases, err = loadScale(ctx, cp, c, p.ns, p.services, p.podMirrors); err != nil {
			return err
		}
		p.loaded = time.Since(t0)
		fmt.Printf("loaded %s (%d Services, %d EndpointSlices, %d records) in %v: %s\n",
			p.name(), p.objects, p.objects, p.records, p.loaded.Round(time.Second), phaseRates(p.phases))
		t0 = time.Now()
		if err := settle(ctx, cp); err != nil {
			return err
		}
		p.settled = time.Since(t0)
		fmt.Printf("control plane idle after %v\n", p.settled.Round(time.Second))
		var gs, ks []result
		for round := range o.rounds {
			g, err := start(scaleGlobal, p.ns, "s0."+p.ns+".global.", len(scaleClusters)*scaleEndpoints)
			if err != nil {
				return fmt.Errorf("global: %w", err)
			}
			k, err := start(scaleKubernetes, p.ns, "s0-west."+p.ns+".svc.cluster.local.", scaleEndpoints)
			if err != nil {
				return fmt.Errorf("kubernetes: %w", err)
			}
			gs, ks = append(gs, g), append(ks, k)
			fmt.Printf("%s, round %d: global ready in %v (CPU %v, control plane %v; heap %.1f MiB), kubernetes in %v (CPU %v, control plane %v; heap %.1f MiB)\n",
				p.name(), round+1, g.ready.Round(time.Millisecond), g.cpu, g.cpCPU, g.heap/(1<<20),
				k.ready.Round(time.Millisecond), k.cpu, k.cpCPU, k.heap/(1<<20))
		}
		p.g, p.k = summarize(gs, gEmpty, p.records), summarize(ks, kEmpty, p.records)
		return nil
	}

	var points []*scalePoint
	if o.largeServices > 0 {
		// The large point first: its Services are headless, so deleting them is quick (deleting a
		// ClusterIP Service releases its IP, as slowly as allocating it).
		p := newScalePoint(scaleLargeNS, o.largeServices, false)
		if err := measure(p); err != nil {
			return fmt.Errorf("%s: %w", p.name(), err)
		}
		t0 := time.Now()
		if err := clearScale(ctx, c, p.ns); err != nil {
			return err
		}
		// A fresh kube-apiserver for the next load, as for this one: after holding and deleting
		// 80,000 objects, it allocates ClusterIPs at about half the rate (its heap).
		cp.StopAPIServer()
		if err := cp.StartAPIServer(ctx); err != nil {
			return err
		}
		fmt.Printf("deleted namespace %s and restarted kube-apiserver in %v\n", p.ns, time.Since(t0).Round(time.Second))
		points = append(points, p)
	}
	p := newScalePoint(scaleNS, o.services, true)
	if err := measure(p); err != nil {
		return fmt.Errorf("%s: %w", p.name(), err)
	}
	points = append(points, p)

	// The ClusterIP Services' loading rate, if the point with per-pod mirrors was loaded.
	var clusterIPs *loadPhase
	for _, p := range points {
		for i, ph := range p.phases {
			if ph.clusterIP {
				clusterIPs = &p.phases[i]
			}
		}
	}
	intro := "Each plugin starts alone in a `bin/coredns`, watching one namespace, " + strconv.Itoa(o.rounds) + " times interleaved " +
		"with the other; its baseline is one start before any load. Ready = process start to `/ready` 200, polled every 10 ms " +
		"(median, and every run), each start once the control plane is idle (see below); CPU to ready = the CPU time coredns " +
		"used until then, and the control plane's (etcd, kube-apiserver, kube-controller-manager) meanwhile, medians: ready minus " +
		"CPU is time spent waiting, on the API server or for a core. Each start must then answer the probe query with every record (12 A records for `s0` from " +
		"global, 3 for `s0-west` from kubernetes). Heap in use after a forced GC (`/debug/pprof/heap?gc=1`) and RSS from /proc, " +
		"medians; bytes per record = (heap - baseline heap) / records. Every global service is 4 clusters (the local headless " +
		"Service and 3 Linkerd headless mirrors) x 3 endpoints, each Service with one EndpointSlice. The two loads are measured " +
		"one after the other, each alone in the cluster (the kubernetes plugin watches every namespace whatever its `namespaces` " +
		"says: the first load is deleted, and kube-apiserver restarted, before the second), and only once the control plane is idle (under a " +
		"tenth of a core for 2 s): after the load, kube-controller-manager's EndpointSliceMirroring controller works through every selector-less " +
		"Service, listing the slices of its namespace each time, so all Services are created before any slice; after a start, " +
		"kube-apiserver stays busy for a second or two after the lists it served, on the cores the next start needs.\n\n"
	for _, p := range points {
		if p.podMirrors {
			intro += fmt.Sprintf("- **%s** (Linkerd's real shape): %d records, as %d Services and %d EndpointSlices in namespace `%s`, "+
				"with Linkerd's per-pod mirror, a ClusterIP Service and its slice, for every mirror record (%d of each). "+
				"Loaded in %v: %s; idle %v later.\n", p.name(), p.records, p.objects, p.objects, p.ns, p.perPod,
				p.loaded.Round(time.Second), phaseRates(p.phases), p.settled.Round(time.Second))
			continue
		}
		intro += fmt.Sprintf("- **%s** (the issue's shape): %d records, as %d headless Services and %d EndpointSlices in namespace `%s`, "+
			"loaded in %v: %s; idle %v later. Without per-pod mirrors the mirror records are as ready as their headless mirror's "+
			"slice says, a state the plugin supports. They are left out for the time they would take to load: each is a ClusterIP "+
			"Service, and kube-apiserver counts every allocated ClusterIP on each allocation (for its metrics: "+
			"`ipallocator.(*Allocator).Used`), so they load ever slower, in time quadratic in their number",
			p.name(), p.records, p.objects, p.objects, p.ns, p.loaded.Round(time.Second), phaseRates(p.phases), p.settled.Round(time.Second))
		if clusterIPs != nil {
			n := p.services * (len(scaleClusters) - 1) * scaleEndpoints
			est := time.Duration(float64(clusterIPs.took) * math.Pow(float64(n)/float64(clusterIPs.objects), 2))
			intro += fmt.Sprintf(": %d took %v here (%.0f/s), so the %d of %d global services would take about %.1f hours",
				clusterIPs.objects, clusterIPs.took.Round(time.Second), clusterIPs.rate(), n, p.services, est.Hours())
		}
		intro += ".\n"
	}
	s := section{
		title:  "Scale and memory",
		intro:  intro,
		header: []string{"Load", "Plugin", "Ready after start", "Every run", "CPU to ready: coredns, control plane", "Heap in use", "RSS", "Bytes per record"},
	}
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	s.rows = [][]string{
		{"none", "global", gEmpty.ready.Round(time.Millisecond).String(), "", cpuCell(gEmpty.cpu, gEmpty.cpCPU), mib(gEmpty.heap), mib(gEmpty.rss), ""},
		{"none", "kubernetes", kEmpty.ready.Round(time.Millisecond).String(), "", cpuCell(kEmpty.cpu, kEmpty.cpCPU), mib(kEmpty.heap), mib(kEmpty.rss), ""},
	}
	for _, p := range points {
		for _, x := range []struct {
			plugin string
			s      summary
		}{{"global", p.g}, {"kubernetes", p.k}} {
			s.rows = append(s.rows, []string{p.name(), x.plugin, x.s.ready.Round(time.Millisecond).String(), x.s.runs,
				cpuCell(x.s.cpu, x.s.cpCPU), mib(x.s.heap), mib(x.s.rss), fmt.Sprintf("%.0f", x.s.perRecord)})
		}
	}
	r.add(s)
	for _, p := range points {
		if p.podMirrors {
			r.goal(fmt.Sprintf("Memory per record at %dk records, per-pod mirrors included", p.records/1000), "≤ 0.5 KB",
				fmt.Sprintf("%.0f bytes (the kubernetes plugin: %.0f)", p.g.perRecord, p.k.perRecord))
		}
	}
	for _, p := range points {
		what := fmt.Sprintf("Ready after start, %d global services (%dk records, %dk objects, no per-pod mirrors)", p.services, p.records/1000, 2*p.objects/1000)
		if p.podMirrors {
			what = fmt.Sprintf("Ready after start, %d global services (%dk records, %dk objects with per-pod mirrors)", p.services, p.records/1000, 2*p.objects/1000)
		}
		r.goal(what, "≤ 2 s, below the kubernetes plugin",
			fmt.Sprintf("%v (the kubernetes plugin: %v); every run %s (kubernetes %s)", p.g.ready.Round(time.Millisecond),
				p.k.ready.Round(time.Millisecond), p.g.runs, p.k.runs))
	}
	return nil
}

// controlPlaneCPU is the CPU time etcd, kube-apiserver and kube-controller-manager have used.
func controlPlaneCPU(cp *harness.ControlPlane) (d time.Duration) {
	for _, t := range cp.CPUTime() {
		d += t
	}
	return d
}

// cpuCell renders coredns's and the control plane's CPU time to ready.
func cpuCell(coredns, cp time.Duration) string {
	return fmt.Sprintf("%v, %v", coredns.Round(10*time.Millisecond), cp.Round(10*time.Millisecond))
}

// loaderClient is a client for loading objects, not for measuring the API server: no client-side
// rate limit. (Protobuf instead of JSON loads no faster: kube-apiserver's CPU is the limit.)
func loaderClient(c *rest.Config) (kubernetes.Interface, error) {
	rc := rest.CopyConfig(c)
	rc.QPS, rc.Burst = 5000, 10000
	return kubernetes.NewForConfig(rc)
}

// settle waits until the control plane is idle (under a tenth of a core for two seconds in a
// row): after a load, kube-controller-manager may still be working through the events, and a
// start-up measured meanwhile would share the cores with it.
func settle(ctx context.Context, cp *harness.ControlPlane) error {
	deadline := time.Now().Add(10 * time.Minute)
	for quiet, last := 0, controlPlaneCPU(cp); quiet < 2; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		now := controlPlaneCPU(cp)
		if now-last < 100*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
		last = now
		if time.Now().After(deadline) {
			return fmt.Errorf("the control plane is still busy 10 minutes after the load")
		}
	}
	return nil
}

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
	var phases []loadPhase
	phase := func(what string, objects int, f func(i int) error) error {
		t0, cpu0 := time.Now(), cp.CPUTime()
		if err := parallel(ctx, n, f); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		p := loadPhase{what: what, objects: objects, took: time.Since(t0), clusterIP: strings.HasPrefix(what, "ClusterIP")}
		phases = append(phases, p)
		// Where the CPU went, in cores.
		var use []string
		for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager"} {
			use = append(use, fmt.Sprintf("%s %.2f", name, (cp.CPUTime()[name]-cpu0[name]).Seconds()/p.took.Seconds()))
		}
		fmt.Printf("  %d %s in %v, %.0f/s; cores used: %s\n", p.objects, p.what, p.took.Round(time.Second), p.rate(), strings.Join(use, ", "))
		return nil
	}
	mirrors := len(scaleClusters) - 1
	ips := make([][]string, n) // per global service, its per-pod mirrors' ClusterIPs, by mirror and endpoint
	if podMirrors {
		if err := phase("ClusterIP Services (the per-pod mirrors)", n*mirrors*scaleEndpoints, func(i int) error {
			for ci := 1; ci < len(scaleClusters); ci++ {
				for e := range scaleEndpoints {
					svc, err := c.CoreV1().Services(ns).Create(ctx, scalePodMirror(i, ci, e), metav1.CreateOptions{})
					if err != nil {
						return err
					}
					ips[i] = append(ips[i], svc.Spec.ClusterIP)
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if err := phase("headless Services", n*len(scaleClusters), func(i int) error {
		for ci := range scaleClusters {
			if _, err := c.CoreV1().Services(ns).Create(ctx, scaleService(ns, i, ci), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	slices := n * len(scaleClusters)
	if podMirrors {
		slices += n * mirrors * scaleEndpoints
	}
	if err := phase("EndpointSlices", slices, func(i int) error {
		for ci := range scaleClusters {
			var addrs []string
			if ci > 0 && podMirrors {
				addrs = ips[i][(ci-1)*scaleEndpoints : ci*scaleEndpoints]
			}
			if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, scaleSlice(ns, i, ci, addrs), metav1.CreateOptions{}); err != nil {
				return err
			}
			if ci == 0 || !podMirrors {
				continue
			}
			for e := range scaleEndpoints {
				if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, scalePodMirrorSlice(i, ci, e), metav1.CreateOptions{}); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return phases, nil
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

// micro runs the Go micro-benchmarks of the query path and of an index update, and the
// in-process memory benchmark at 120k records.
func micro(ctx context.Context, _ *harness.ControlPlane, _ options, r *report) error {
	run := func(env []string, args ...string) ([]string, error) {
		args = append([]string{"test", "-run", "^$"}, args...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "cpu:") {
				keep = append(keep, l)
			}
		}
		fmt.Println(strings.Join(keep, "\n"))
		return keep, nil
	}
	serve, err := run(nil, "-bench", ".", "-benchmem", "-count", "3", "./plugin/global/")
	if err != nil {
		return err
	}
	// Publishing again without the garbage collector: what of its time the collector takes.
	noGC, err := run([]string{"GOGC=off"}, "-bench", "Publish", "-benchmem", "-count", "3", "./plugin/global/")
	if err != nil {
		return err
	}
	r.add(section{
		title: "Micro-benchmarks",
		intro: "`go test -run '^$' -bench . -benchmem -count 3 ./plugin/global/`: `ServeDNS` for every name form (the reply is built, not " +
			"sent; addresses rotated, the default); one index update (a global service rebuilt and a snapshot published) among " +
			"1,000, 10,000 and 100,000 global services (in process, synthetic: the snapshot is a trie of 16-way branches over leaves of 16 " +
			"names at most, a change copies the branches and the leaf on its path), the changed service each in turn (`changing=all`) or one " +
			"of the same 1,000 spread over them (`changing=1000`), and an index of 1,000 beside the index of 100,000, still held " +
			"(`beside=100000`: the index work of 1,000 in the heap of 100,000; what it adds to 1,000 alone is the bigger heap's cost, not " +
			"the index's), and all again with `GOGC=off`, below; one endpoint's readiness changed in one slice of a global service of 10 and of " +
			"10,000 endpoints, slices of 100 (`Rebuild`: the big one copies only the parts of its records that the change touches).",
		after: strings.Join(serve, "\n") + "\n\n# GOGC=off go test -run '^$' -bench Publish -benchmem -count 3 ./plugin/global/\n" +
			strings.Join(noGC, "\n") + "\n",
	})
	medianOf := func(out []string, name, unit string) string {
		var lines []string
		for _, l := range out {
			// name-<GOMAXPROCS>, not a longer name: srv is not srv-10000.
			if rest, ok := strings.CutPrefix(l, name+"-"); ok && isGOMAXPROCS(rest) {
				lines = append(lines, l)
			}
		}
		if v := benchMetric(lines, unit); len(v) > 0 {
			return strconv.FormatFloat(quantile(v, .5), 'f', -1, 64)
		}
		return "?"
	}
	median := func(name, unit string) string { return medianOf(serve, name, unit) }
	// ratio is a/b of two medians, "?" when either is.
	ratio := func(a, b string) string {
		x, errA := strconv.ParseFloat(a, 64)
		y, errB := strconv.ParseFloat(b, 64)
		if errA != nil || errB != nil || y == 0 {
			return "?"
		}
		return strconv.FormatFloat(x/y, 'f', 1, 64)
	}
	r.goal("ServeDNS, service name (4 A records) and SRV (median of 3)", "≤ 0.5 µs and ≤ 4 allocs; SRV ≤ 1.5 µs",
		fmt.Sprintf("%s ns, %s allocs; SRV %s ns, %s allocs",
			median("BenchmarkServeDNS/service", "ns/op"), median("BenchmarkServeDNS/service", "allocs/op"),
			median("BenchmarkServeDNS/srv", "ns/op"), median("BenchmarkServeDNS/srv", "allocs/op")))
	r.goal("ServeDNS, SRV of a service of 10,000 endpoints over UDP (median of 3)", "≤ 10× the SRV above",
		fmt.Sprintf("%s ns (%s×), %s allocs", median("BenchmarkServeDNS/srv-10000", "ns/op"),
			ratio(median("BenchmarkServeDNS/srv-10000", "ns/op"), median("BenchmarkServeDNS/srv", "ns/op")), median("BenchmarkServeDNS/srv-10000", "allocs/op")))
	// Issue 39 asked 0.6 µs; a session lowered it to 2.5× the service name with no run behind
	// either; issue 46 asks 1.3×. All are kept.
	r.goal("ServeDNS, a name ranked from the client's node (6 A records over 5 client tiers; median of 3)", "≤ 0.6 µs; ≤ 1.3× the service name and ≤ 4 allocs",
		fmt.Sprintf("%s ns (%s× the service name), %s allocs", median("BenchmarkServeDNS/client", "ns/op"),
			ratio(median("BenchmarkServeDNS/client", "ns/op"), median("BenchmarkServeDNS/service", "ns/op")), median("BenchmarkServeDNS/client", "allocs/op")))
	bySize := func(kind string) string {
		var out []string
		for _, n := range []string{"10", "10000"} {
			out = append(out, fmt.Sprintf("%s: %s ns (%s× service-%s), %s allocs", n, median("BenchmarkServeDNS/"+kind+"-"+n, "ns/op"),
				ratio(median("BenchmarkServeDNS/"+kind+"-"+n, "ns/op"), median("BenchmarkServeDNS/service-"+n, "ns/op")), n,
				median("BenchmarkServeDNS/"+kind+"-"+n, "allocs/op")))
		}
		return strings.Join(out, "; ") + fmt.Sprintf("; 10,000 / 10: %s×", ratio(median("BenchmarkServeDNS/"+kind+"-10000", "ns/op"), median("BenchmarkServeDNS/"+kind+"-10", "ns/op")))
	}
	r.goal("ServeDNS ranked from a node, a service of 10 and of 10,000 endpoints over 3 zones (median of 3)",
		"≤ 1.3× the service name and ≤ 4 allocs at each; 10,000 within 1.5× of 10", bySize("client"))
	r.goal("ServeDNS of a zonal name, the same services (median of 3)", "≤ 4 allocs; 10,000 within 1.5× of 10", bySize("zonal"))
	publish := func(out []string, changing, unit string) string {
		var vs []string
		for _, n := range []string{"1000", "10000", "100000"} {
			name := "BenchmarkPublish/services=" + n + "/changing=" + changing
			if changing == "1000" && n == "1000" {
				name = "BenchmarkPublish/services=1000/changing=all" // the same thing
			}
			v := medianOf(out, name, unit)
			if unit == "ns/op" {
				v = usec(v)
			}
			vs = append(vs, v)
		}
		return strings.Join(vs, " / ")
	}
	beside := func(out []string) string {
		return usec(medianOf(out, "BenchmarkPublish/services=1000/beside=100000", "ns/op"))
	}
	r.goal("Publishing one change among 1k / 10k / 100k global services (median of 3)", "independent of N",
		fmt.Sprintf("%s µs; %s bytes; %s allocations. The same 1,000 changing: %s µs; 1k beside 100k (1k's index in 100k's heap): %s µs; "+
			"GC off: %s µs, beside %s µs",
			publish(serve, "all", "ns/op"), publish(serve, "all", "B/op"), publish(serve, "all", "allocs/op"),
			publish(serve, "1000", "ns/op"), beside(serve), publish(noGC, "all", "ns/op"), beside(noGC)))
	r.goal("Rebuilding a global service of 10 / 10,000 endpoints after one change to one slice (median of 3)", "O(change): no sort, no copy of the whole service",
		fmt.Sprintf("%s / %s µs; %s / %s bytes", usec(median("BenchmarkRebuild/endpoints=10", "ns/op")), usec(median("BenchmarkRebuild/endpoints=10000", "ns/op")),
			median("BenchmarkRebuild/endpoints=10", "B/op"), median("BenchmarkRebuild/endpoints=10000", "B/op")))
	sync, err := run(nil, "-bench", "Sync", "-benchmem", "-count", "3", "./plugin/global/writer/")
	if err != nil {
		return err
	}
	r.add(section{
		title: "Writer",
		intro: "`go test -run '^$' -bench Sync -benchmem -count 3 ./plugin/global/writer/`: the writer's sync of a global service of 10,000 " +
			"endpoints (slices of 100) after one endpoint's readiness changed, from its changes since the last sync (what the writer does " +
			"while the cache shows the slices as it wrote them) and from its whole state; the API a stand-in that numbers versions, so " +
			"what is measured is the writer's own work.",
		after: strings.Join(sync, "\n") + "\n",
	})
	r.goal("Writer sync of a 10,000-endpoint service after one change, from changes / whole (median of 3)", "what it changes, not the service's size",
		fmt.Sprintf("%s / %s ms; %s / %s KB", msec(medianOf(sync, "BenchmarkSync/from=changes", "ns/op")), msec(medianOf(sync, "BenchmarkSync/from=whole", "ns/op")),
			kib(medianOf(sync, "BenchmarkSync/from=changes", "B/op")), kib(medianOf(sync, "BenchmarkSync/from=whole", "B/op"))))
	mem, err := run(nil, "-bench", "Scale", "-benchtime", "1x", "-count", "3", "./plugin/global/watch/")
	if err != nil {
		return err
	}
	r.add(section{
		title: "Start-up work and memory per record, in process, 1,000 to 100,000 global services",
		intro: "`go test -run '^$' -bench Scale -benchtime 1x -count 3 ./plugin/global/watch/`: the scale step's shape (12 records per " +
			"global service, with a per-pod mirror Service and slice per mirror record: 26 objects per global service) at 1,000, 10,000 " +
			"and 100,000 global services, handed to the watcher's tables as a reflector's initial lists and published: ns/op is the " +
			"plugin's own start-up work, without the API server's encoding and client-go's decoding (the scale step measures those " +
			"on the real control plane). Synthetic: loading 90,000 per-pod mirrors (ClusterIP Services) into the API server here takes " +
			"over an hour, 900,000 many more. `live-B/record` is the live heap after a forced GC per record; `inuse-B/record` adds the " +
			"free slots of the heap spans in use, which vary with when the GC ran during the load (see the benchmark's comment).",
		after: strings.Join(mem, "\n") + "\n",
	})
	at := func(n, unit string) []float64 {
		var lines []string
		for _, l := range mem {
			if strings.HasPrefix(l, "BenchmarkScale/services="+n+"-") {
				lines = append(lines, l)
			}
		}
		return benchMetric(lines, unit)
	}
	live, inuse := at("10000", "live-B/record"), at("10000", "inuse-B/record")
	if len(live) == 0 || len(inuse) == 0 {
		return fmt.Errorf("no live-B/record or inuse-B/record in %q", mem)
	}
	r.goal("Memory per record at 120k records, per-pod mirrors included, local endpoints' zones and nodes kept (in process)", "≤ 0.5 KB; ≤ 420 B",
		fmt.Sprintf("live %.0f bytes (median of %d; %.0f to %.0f), heap in use %.0f (%.0f to %.0f); at 12k / 1.2M records live %.0f / %.0f",
			quantile(live, .5), len(live), slices.Min(live), slices.Max(live), quantile(inuse, .5), slices.Min(inuse), slices.Max(inuse),
			quantile(at("1000", "live-B/record"), .5), quantile(at("100000", "live-B/record"), .5)))
	pods, err := run(nil, "-bench", "PodTable", "-benchtime", "1x", "-count", "3", "./plugin/global/watch/")
	if err != nil {
		return err
	}
	perPod := benchMetric(pods, "live-B/pod")
	if len(perPod) == 0 {
		return fmt.Errorf("no live-B/pod in %q", pods)
	}
	r.goal("Memory per watched Pod at 100k Pods (client_locality pod; in process: `go test -bench PodTable ./plugin/global/watch/`)", "≤ 150 B",
		fmt.Sprintf("live %.0f bytes (median of %d)", quantile(perPod, .5), len(perPod)))
	if err := rankedMemory(r, run); err != nil {
		return err
	}
	msAt := func(n string) string { return fmt.Sprintf("%.0f", quantile(at(n, "ns/op"), .5)/1e6) }
	r.goal("Start-up work in process, 1k / 10k / 100k global services (lists to published index, median of 3)", "grows linearly",
		fmt.Sprintf("%s / %s / %s ms", msAt("1000"), msAt("10000"), msAt("100000")))
	return nil
}

// rankedMemory reports what answers ranked from clients keep beside a service, with run, the
// micro step's go test.
func rankedMemory(r *report, run func([]string, ...string) ([]string, error)) error {
	out, err := run(nil, "-bench", "RankedMemory", "-benchtime", "1x", "-count", "3", "./plugin/global/index/")
	if err != nil {
		return err
	}
	placed, memo := benchMetric(out, "placed-B/record"), benchMetric(out, "memo-B/answer")
	if len(placed) == 0 || len(memo) == 0 {
		return fmt.Errorf("no placed-B/record or memo-B/answer in %q", out)
	}
	r.goal("Memory of ranked answers, a service of 10,000 endpoints on 100 nodes (client_locality; in process: `go test -bench RankedMemory ./plugin/global/index/`)",
		"≤ 32 B per record placed; ≤ 3 KB per remembered answer of 100 records, 64 at most per service",
		fmt.Sprintf("%.0f B per record, %.0f B per answer (medians of %d)", quantile(placed, .5), quantile(memo, .5), len(placed)))
	return nil
}

// benchMetric returns every value of metric unit in go test -bench output lines.
func benchMetric(lines []string, unit string) []float64 {
	var out []float64
	for _, l := range lines {
		f := strings.Fields(l)
		for i := 1; i < len(f); i++ {
			if f[i] == unit {
				if v, err := strconv.ParseFloat(f[i-1], 64); err == nil {
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// usec turns a ns/op figure into µs, one decimal.
// usec, msec and kib write a benchmark's ns/op and B/op in microseconds, milliseconds and KiB.
func msec(ns string) string { return scaled(ns, 1e6, 2) }
func kib(b string) string   { return scaled(b, 1024, 0) }

func scaled(v string, by float64, prec int) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return v
	}
	return strconv.FormatFloat(f/by, 'f', prec, 64)
}

func usec(ns string) string { return scaled(ns, 1000, 1) }

// isGOMAXPROCS tells whether a benchmark line's rest, after its name and "-", starts with the
// GOMAXPROCS suffix go test adds, and nothing more of a name.
func isGOMAXPROCS(rest string) bool {
	f := strings.Fields(rest)
	if len(f) == 0 {
		return false
	}
	_, err := strconv.Atoi(f[0])
	return err == nil
}
