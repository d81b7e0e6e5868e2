package main

import (
	"context"
	"fmt"
	"io"
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
	scaleNS = "scale"
)

var scaleClusters = []string{"", "west", "north", "south"} // "": the local Service

func scale(ctx context.Context, cp *harness.ControlPlane, o options, r *report) error {
	rc := rest.CopyConfig(cp.Config)
	rc.QPS, rc.Burst = 5000, 10000 // loading, not measuring, the API server
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	for _, ns := range []string{scaleNS, "empty"} {
		if err := harness.EnsureNamespace(ctx, c, ns); err != nil {
			return err
		}
	}
	records := o.services * len(scaleClusters) * scaleEndpoints
	// Per global service: the local Service and each mirror, and a per-pod mirror per mirror record.
	objects := o.services * (len(scaleClusters) + (len(scaleClusters)-1)*scaleEndpoints)
	var loaded time.Duration

	// start runs one plugin alone in a bin/coredns and measures it: ready = process start to
	// /ready 200 (polled every 10 ms); the heap after a full collection (what the caches hold, not
	// garbage).
	type result struct {
		ready     time.Duration
		heap, rss float64
	}
	runs := 0
	start := func(tmpl, ns, probe string, want int) (result, error) {
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
		t0 := time.Now()
		d, err := harness.StartCoreDNSProcess(corefile, filepath.Join(o.work, "coredns-scale-"+strconv.Itoa(runs)), nil, o.corednsEnv...)
		if err != nil {
			return result{}, err
		}
		defer d.Stop()
		r := result{ready: time.Since(t0)}
		if probe != "" {
			if n, _, err := count(d.Addr, probe, "tcp"); err != nil || n != want {
				return r, fmt.Errorf("%s answers %d records, want %d (%v)", probe, n, want, err)
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
			return r, fmt.Errorf("%v %v", err, merr)
		}
		r.heap, r.rss = m["go_memstats_heap_inuse_bytes"], rssBytes(d.PID())
		return r, nil
	}

	// Baselines first, before the load: the kubernetes plugin watches every namespace whatever
	// its `namespaces` says.
	gEmpty, err := start(scaleGlobal, "empty", "", 0)
	if err != nil {
		return fmt.Errorf("global, before the load: %w", err)
	}
	kEmpty, err := start(scaleKubernetes, "empty", "", 0)
	if err != nil {
		return fmt.Errorf("kubernetes, before the load: %w", err)
	}
	t0 := time.Now()
	if err := loadScale(ctx, c, o.services); err != nil {
		return err
	}
	loaded = time.Since(t0)
	fmt.Printf("loaded %d global services (%d Services, %d EndpointSlices, %d records) in %v\n",
		o.services, objects, objects, records, loaded.Round(time.Second))

	// Then each plugin, started o.rounds times, interleaved: start-up is reported as the median
	// and the spread.
	var gs, ks []result
	for round := range o.rounds {
		g, err := start(scaleGlobal, scaleNS, "s0.scale.global.", len(scaleClusters)*scaleEndpoints)
		if err != nil {
			return fmt.Errorf("global: %w", err)
		}
		k, err := start(scaleKubernetes, scaleNS, "s0-west.scale.svc.cluster.local.", scaleEndpoints)
		if err != nil {
			return fmt.Errorf("kubernetes: %w", err)
		}
		gs, ks = append(gs, g), append(ks, k)
		fmt.Printf("round %d: global ready in %v (heap %.1f MiB), kubernetes in %v (heap %.1f MiB)\n", round+1,
			g.ready.Round(time.Millisecond), g.heap/(1<<20), k.ready.Round(time.Millisecond), k.heap/(1<<20))
	}
	// summary is one plugin's runs: the median start-up, every run's, and the median heap and RSS.
	type summary struct {
		ready     time.Duration
		runs      string
		heap, rss float64
		perRecord float64
	}
	summarize := func(rs []result, base result) summary {
		var ready, heap, rss []float64
		var runs []string
		for _, r := range rs {
			ready, heap, rss = append(ready, r.ready.Seconds()), append(heap, r.heap), append(rss, r.rss)
			runs = append(runs, r.ready.Round(time.Millisecond).String())
		}
		x := summary{ready: time.Duration(quantile(ready, .5) * float64(time.Second)), runs: strings.Join(runs, ", "),
			heap: quantile(heap, .5), rss: quantile(rss, .5)}
		x.perRecord = (x.heap - base.heap) / float64(records)
		return x
	}
	g, k := summarize(gs, gEmpty), summarize(ks, kEmpty)
	s := section{
		title: "Scale and memory",
		intro: fmt.Sprintf("%d global services x 4 clusters (the local headless Service and 3 mirrors) x 3 endpoints = %d records, "+
			"as %d Services and %d EndpointSlices in one namespace (with Linkerd's per-pod mirror, a ClusterIP Service and its slice, "+
			"for every mirror record), loaded in %v. Each plugin starts alone in a `bin/coredns`, watching that namespace, %d times "+
			"interleaved with the other; its baseline is one start before the load. Ready = process start to `/ready` 200, polled "+
			"every 10 ms (median, and every run); heap in use after a forced GC (`/debug/pprof/heap?gc=1`) and RSS from /proc, "+
			"medians; bytes per record = (heap - baseline heap) / records.",
			o.services, records, objects, objects, loaded.Round(time.Second), o.rounds),
		header: []string{"Plugin", "Ready after start", "Every run", "Heap in use", "RSS", "Bytes per record"},
	}
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	s.rows = [][]string{
		{"global, before the load", gEmpty.ready.Round(time.Millisecond).String(), "", mib(gEmpty.heap), mib(gEmpty.rss), ""},
		{"kubernetes, before the load", kEmpty.ready.Round(time.Millisecond).String(), "", mib(kEmpty.heap), mib(kEmpty.rss), ""},
		{"global", g.ready.Round(time.Millisecond).String(), g.runs, mib(g.heap), mib(g.rss), fmt.Sprintf("%.0f", g.perRecord)},
		{"kubernetes", k.ready.Round(time.Millisecond).String(), k.runs, mib(k.heap), mib(k.rss), fmt.Sprintf("%.0f", k.perRecord)},
	}
	r.add(s)
	r.goal(fmt.Sprintf("Memory per record at %dk records, per-pod mirrors included", records/1000), "≤ 0.5 KB", fmt.Sprintf("%.0f bytes (the kubernetes plugin: %.0f)", g.perRecord, k.perRecord))
	r.goal(fmt.Sprintf("Ready after start, %d global services", o.services), "≤ 2 s, below the kubernetes plugin",
		fmt.Sprintf("%v (the kubernetes plugin: %v)", g.ready.Round(time.Millisecond), k.ready.Round(time.Millisecond)))
	return nil
}

// loadScale creates n global services: a local selector-less headless Service and three mirrors,
// each with one EndpointSlice of three endpoints, as the mirroring controller would write them,
// and for each mirror record its per-pod mirror.
func loadScale(ctx context.Context, c kubernetes.Interface, n int) error {
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				for ci, cluster := range scaleClusters {
					if err := scaleMember(ctx, c, i, ci, cluster); err != nil {
						select {
						case errs <- err:
						default:
						}
						return
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
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

// scaleAddr is local pod e of global service i.
func scaleAddr(i, e int) string { return fmt.Sprintf("10.%d.%d.%d", 200+e, i/256, i%256) }

func scaleMember(ctx context.Context, c kubernetes.Interface, i, ci int, cluster string) error {
	global := fmt.Sprintf("s%d", i)
	var podIPs []string
	if cluster != "" {
		var err error
		if podIPs, err = scalePodMirrors(ctx, c, global, cluster); err != nil {
			return err
		}
	}
	name, labels := global, map[string]string{"mirror.linkerd.io/exported": "true"}
	var annotations map[string]string
	if cluster != "" {
		name = global + "-" + cluster
		labels = map[string]string{"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": cluster}
		annotations = map[string]string{"mirror.linkerd.io/remote-svc-fq-name": global + "." + scaleNS + ".svc.cluster.local"}
	}
	if _, err := c.CoreV1().Services(scaleNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	sliceLabels := map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "bench"}
	for k, v := range labels {
		sliceLabels[k] = v
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-x", Labels: sliceLabels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
	}
	for e := range scaleEndpoints {
		addr := scaleAddr(i, e)
		if cluster != "" {
			addr = podIPs[e]
		}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{addr},
			Hostname:   ptr.To(fmt.Sprintf("%s-%d", global, e)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	_, err := c.DiscoveryV1().EndpointSlices(scaleNS).Create(ctx, es, metav1.CreateOptions{})
	return err
}

// scalePodMirrors creates the per-pod mirrors of a mirror of global as Linkerd and the mirroring
// controller write them (see harness.CreateMirror): a ClusterIP Service <host>-<cluster> and a
// slice of it at the gateway, ready. It returns their ClusterIPs, the mirror's endpoint addresses.
func scalePodMirrors(ctx context.Context, c kubernetes.Interface, global, cluster string) ([]string, error) {
	var ips []string
	for e := range scaleEndpoints {
		name := fmt.Sprintf("%s-%d-%s", global, e, cluster)
		labels := map[string]string{
			harness.LabelMirroredService: "true", harness.LabelClusterName: cluster,
			harness.LabelHeadlessMirrorSvcName: global + "-" + cluster,
		}
		svc, err := c.CoreV1().Services(scaleNS).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.ServiceSpec{IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
				Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		ips = append(ips, svc.Spec.ClusterIP)
		sliceLabels := map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "bench"}
		for k, v := range labels {
			sliceLabels[k] = v
		}
		if _, err := c.DiscoveryV1().EndpointSlices(scaleNS).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-x", Labels: sliceLabels},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](harness.GatewayPort)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{harness.GatewayIP},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	return ips, nil
}

// rssBytes reads a process's resident set size.
func rssBytes(pid int) float64 {
	for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	return 0
}

// micro runs the Go micro-benchmarks of the query path and of an index update, and the
// in-process memory benchmark at 120k records.
func micro(ctx context.Context, _ *harness.ControlPlane, _ options, r *report) error {
	run := func(args ...string) ([]string, error) {
		args = append([]string{"test", "-run", "^$"}, args...)
		cmd := exec.CommandContext(ctx, "go", args...)
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
	serve, err := run("-bench", ".", "-benchmem", "-count", "3", "./plugin/global/")
	if err != nil {
		return err
	}
	r.add(section{
		title: "Micro-benchmarks",
		intro: "`go test -run '^$' -bench . -benchmem -count 3 ./plugin/global/`: `ServeDNS` for every name form (the reply is built, not " +
			"sent; addresses rotated, the default); one index update (a global service rebuilt and a snapshot published) among " +
			"1,000, 10,000 and 100,000 global services (in process, synthetic: the snapshot is a tree of 4,096 shards, a change copies the " +
			"three branches and the shard on its path); one endpoint's readiness changed in one slice of a global service of 10 and of " +
			"10,000 endpoints, slices of 100 (`Rebuild`: the big one merges the changed slice into its sorted records).",
		after: strings.Join(serve, "\n") + "\n",
	})
	median := func(name, unit string) string {
		var lines []string
		for _, l := range serve {
			if strings.HasPrefix(l, name+"-") {
				lines = append(lines, l)
			}
		}
		if v := benchMetric(lines, unit); len(v) > 0 {
			return strconv.FormatFloat(quantile(v, .5), 'f', -1, 64)
		}
		return "?"
	}
	r.goal("ServeDNS, service name (4 A records) and SRV (median of 3)", "≤ 0.5 µs and ≤ 4 allocs; SRV ≤ 1.5 µs",
		fmt.Sprintf("%s ns, %s allocs; SRV %s ns, %s allocs",
			median("BenchmarkServeDNS/service", "ns/op"), median("BenchmarkServeDNS/service", "allocs/op"),
			median("BenchmarkServeDNS/srv", "ns/op"), median("BenchmarkServeDNS/srv", "allocs/op")))
	r.goal("Publishing one change among 1k / 10k / 100k global services (median of 3)", "independent of N",
		fmt.Sprintf("%s / %s / %s µs; %s / %s / %s bytes",
			usec(median("BenchmarkPublish/services=1000", "ns/op")), usec(median("BenchmarkPublish/services=10000", "ns/op")),
			usec(median("BenchmarkPublish/services=100000", "ns/op")),
			median("BenchmarkPublish/services=1000", "B/op"), median("BenchmarkPublish/services=10000", "B/op"), median("BenchmarkPublish/services=100000", "B/op")))
	r.goal("Rebuilding a global service of 10 / 10,000 endpoints after one change to one slice (median of 3)", "no sort of the whole service: O(change), plus one copy of its records",
		fmt.Sprintf("%s / %s µs", usec(median("BenchmarkRebuild/endpoints=10", "ns/op")), usec(median("BenchmarkRebuild/endpoints=10000", "ns/op"))))
	mem, err := run("-bench", "Scale", "-benchtime", "1x", "-count", "3", "./plugin/global/watch/")
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
	r.goal("Memory per record at 120k records, per-pod mirrors included (in process)", "≤ 0.5 KB; ≤ 400 B",
		fmt.Sprintf("live %.0f bytes (median of %d; %.0f to %.0f), heap in use %.0f (%.0f to %.0f); at 12k / 1.2M records live %.0f / %.0f",
			quantile(live, .5), len(live), slices.Min(live), slices.Max(live), quantile(inuse, .5), slices.Min(inuse), slices.Max(inuse),
			quantile(at("1000", "live-B/record"), .5), quantile(at("100000", "live-B/record"), .5)))
	msAt := func(n string) string { return fmt.Sprintf("%.0f", quantile(at(n, "ns/op"), .5)/1e6) }
	r.goal("Start-up work in process, 1k / 10k / 100k global services (lists to published index, median of 3)", "grows linearly",
		fmt.Sprintf("%s / %s / %s ms", msAt("1000"), msAt("10000"), msAt("100000")))
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
func usec(ns string) string {
	v, err := strconv.ParseFloat(ns, 64)
	if err != nil {
		return ns
	}
	return strconv.FormatFloat(v/1000, 'f', 1, 64)
}
