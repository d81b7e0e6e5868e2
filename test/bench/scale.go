package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/test/harness"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	sr := &scaleRun{ctx: ctx, cp: cp, o: o, c: c}
	// Baselines first, before any load: the kubernetes plugin watches every namespace whatever
	// its `namespaces` says.
	if sr.gEmpty, err = sr.start(scaleGlobal, "empty", "", 0); err != nil {
		return fmt.Errorf("global, before the load: %w", err)
	}
	if sr.kEmpty, err = sr.start(scaleKubernetes, "empty", "", 0); err != nil {
		return fmt.Errorf("kubernetes, before the load: %w", err)
	}
	points, err := sr.points()
	if err != nil {
		return err
	}
	r.add(scaleSection(o, points, sr.gEmpty, sr.kEmpty))
	scaleGoals(r, points)
	return nil
}

// scaleRun is the scale step's state: the plugins' starts so far, and their baselines.
type scaleRun struct {
	ctx            context.Context
	cp             *harness.ControlPlane
	o              options
	c              kubernetes.Interface // the loader's
	runs           int
	gEmpty, kEmpty scaleResult
}

// scaleResult is one start of a plugin.
type scaleResult struct {
	ready      time.Duration
	cpu, cpCPU time.Duration // coredns's CPU time to ready, the control plane's meanwhile
	heap, rss  float64
}

// start runs one plugin alone in a bin/coredns and measures it: ready = process start to /ready
// 200 (polled every 10 ms); the heap after a full collection (what the caches hold, not garbage).
func (sr *scaleRun) start(tmpl, ns, probe string, want int) (scaleResult, error) {
	// On an idle control plane, as a restart in a settled cluster finds it: after serving the
	// previous start's lists of 80,000 objects kube-apiserver stays busy for a second or two,
	// on the cores the next start needs (5 starts of global at 10,000 global services took
	// 0.93-1.36 s without this wait, 0.85-0.95 s with it).
	if err := settle(sr.ctx, sr.cp); err != nil {
		return scaleResult{}, err
	}
	ports := make([]string, 4)
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			return scaleResult{}, err
		}
	}
	corefile := render(tmpl, "PORT", ports[0], "READY", "127.0.0.1:"+ports[1], "METRICS", "127.0.0.1:"+ports[2],
		"PPROF", "127.0.0.1:"+ports[3], "KUBECONFIG", sr.cp.Kubeconfig, "NAMESPACE", ns)
	sr.runs++
	// Its ports may have been an earlier process's: no connection to that one is reused.
	plainHTTP.CloseIdleConnections()
	t0, cp0 := time.Now(), controlPlaneCPU(sr.cp)
	d, err := harness.StartCoreDNSProcess(corefile, filepath.Join(sr.o.work, "coredns-scale-"+strconv.Itoa(sr.runs)), nil, sr.o.corednsEnv...)
	if err != nil {
		return scaleResult{}, err
	}
	defer d.Stop()
	r := scaleResult{ready: time.Since(t0), cpCPU: controlPlaneCPU(sr.cp) - cp0}
	r.cpu, _ = d.CPUTime()
	// A failure says what coredns said last, before its directory goes with the run.
	failed := func(err error) (scaleResult, error) {
		return r, fmt.Errorf("%w; coredns exited: %v; its last lines:\n%s", err, d.Exited(), d.Tail(30))
	}
	if probe != "" {
		if n, _, err := count(d.Addr, probe, "tcp"); err != nil || n != want {
			return failed(fmt.Errorf("%s answers %d records, want %d (%v)", probe, n, want, err))
		}
	}
	heap := io.Discard
	if sr.o.profiles != "" {
		f, err := os.Create(filepath.Join(sr.o.profiles, fmt.Sprintf("heap-%d.pb.gz", sr.runs)))
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

// summarize is one plugin's runs at one point, against its baseline.
func summarize(rs []scaleResult, base scaleResult, records int) summary {
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

// points loads and measures the scale step's points in turn, each alone in the cluster.
func (sr *scaleRun) points() ([]*scalePoint, error) {
	var points []*scalePoint
	if sr.o.largeServices > 0 {
		// The large point first: its Services are headless, so deleting them is quick (deleting a
		// ClusterIP Service releases its IP, as slowly as allocating it).
		p := newScalePoint(scaleLargeNS, sr.o.largeServices, false)
		if err := sr.measure(p); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name(), err)
		}
		t0 := time.Now()
		if err := clearScale(sr.ctx, sr.c, p.ns); err != nil {
			return nil, err
		}
		// A fresh kube-apiserver for the next load, as for this one: after holding and deleting
		// 80,000 objects, it allocates ClusterIPs at about half the rate (its heap).
		sr.cp.StopAPIServer()
		if err := sr.cp.StartAPIServer(sr.ctx); err != nil {
			return nil, err
		}
		fmt.Printf("deleted namespace %s and restarted kube-apiserver in %v\n", p.ns, time.Since(t0).Round(time.Second))
		points = append(points, p)
	}
	p := newScalePoint(scaleNS, sr.o.services, true)
	if err := sr.measure(p); err != nil {
		return nil, fmt.Errorf("%s: %w", p.name(), err)
	}
	points = append(points, p)
	return points, nil
}

// measure loads p, then starts each plugin o.rounds times, interleaved: start-up is reported as
// the median and the spread.
func (sr *scaleRun) measure(p *scalePoint) error {
	if err := harness.EnsureNamespace(sr.ctx, sr.c, p.ns); err != nil {
		return err
	}
	t0 := time.Now()
	var err error
	if p.phases, err = loadScale(sr.ctx, sr.cp, sr.c, p.ns, p.services, p.podMirrors); err != nil {
		return err
	}
	p.loaded = time.Since(t0)
	fmt.Printf("loaded %s (%d Services, %d EndpointSlices, %d records) in %v: %s\n",
		p.name(), p.objects, p.objects, p.records, p.loaded.Round(time.Second), phaseRates(p.phases))
	t0 = time.Now()
	if err := settle(sr.ctx, sr.cp); err != nil {
		return err
	}
	p.settled = time.Since(t0)
	fmt.Printf("control plane idle after %v\n", p.settled.Round(time.Second))
	var gs, ks []scaleResult
	for round := range sr.o.rounds {
		g, err := sr.start(scaleGlobal, p.ns, "s0."+p.ns+".global.", len(scaleClusters)*scaleEndpoints)
		if err != nil {
			return fmt.Errorf("global: %w", err)
		}
		k, err := sr.start(scaleKubernetes, p.ns, "s0-west."+p.ns+".svc.cluster.local.", scaleEndpoints)
		if err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
		gs, ks = append(gs, g), append(ks, k)
		fmt.Printf("%s, round %d: global ready in %v (CPU %v, control plane %v; heap %.1f MiB), kubernetes in %v (CPU %v, control plane %v; heap %.1f MiB)\n",
			p.name(), round+1, g.ready.Round(time.Millisecond), g.cpu, g.cpCPU, g.heap/(1<<20),
			k.ready.Round(time.Millisecond), k.cpu, k.cpCPU, k.heap/(1<<20))
	}
	p.g, p.k = summarize(gs, sr.gEmpty, p.records), summarize(ks, sr.kEmpty, p.records)
	return nil
}

// scaleSection is the report's section of the points measured.
func scaleSection(o options, points []*scalePoint, gEmpty, kEmpty scaleResult) section {
	s := section{
		title:  "Scale and memory",
		intro:  scaleIntro(o, points),
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
	return s
}

// scaleIntro is the section's text: how the points were measured, and each point's load.
func scaleIntro(o options, points []*scalePoint) string {
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
	return intro
}

// scaleGoals reports the goals of the points measured.
func scaleGoals(r *report, points []*scalePoint) {
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
