package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	records := o.services * len(scaleClusters) * 3
	var loaded time.Duration

	type result struct {
		ready      time.Duration
		heap, rss  float64
		name, what string
	}
	var res []result
	// Baselines first, before the load: the kubernetes plugin watches every namespace whatever
	// its `namespaces` says.
	for _, run := range []struct{ name, tmpl, ns, probe string }{
		{"global, before the load", scaleGlobal, "empty", ""},
		{"kubernetes, before the load", scaleKubernetes, "empty", ""},
		{"load", "", "", ""},
		{"global", scaleGlobal, scaleNS, "s0.scale.global."},
		{"kubernetes", scaleKubernetes, scaleNS, "s0-west.scale.svc.cluster.local."},
	} {
		if run.name == "load" {
			t0 := time.Now()
			if err := loadScale(ctx, c, o.services); err != nil {
				return err
			}
			loaded = time.Since(t0)
			fmt.Printf("loaded %d global services (%d Services, %d EndpointSlices, %d records) in %v\n",
				o.services, o.services*4, o.services*4, records, loaded.Round(time.Second))
			continue
		}
		ports := make([]string, 4)
		for i := range ports {
			if ports[i], err = freePort(); err != nil {
				return err
			}
		}
		corefile := render(run.tmpl, "PORT", ports[0], "READY", "127.0.0.1:"+ports[1], "METRICS", "127.0.0.1:"+ports[2],
			"PPROF", "127.0.0.1:"+ports[3], "KUBECONFIG", cp.Kubeconfig, "NAMESPACE", run.ns)
		start := time.Now()
		d, err := harness.StartCoreDNSProcess(corefile, filepath.Join(o.work, "coredns-scale-"+strconv.Itoa(len(res))), nil)
		if err != nil {
			return err
		}
		ready := time.Since(start) // StartCoreDNSProcess returns once /ready says 200
		if run.probe != "" {
			if n, _, err := count(d.Addr, run.probe, "tcp"); err != nil || n == 0 {
				d.Stop()
				return fmt.Errorf("%s: %s answers %d records (%v)", run.name, run.probe, n, err)
			}
		}
		// The heap after a full collection: what the caches hold, not garbage.
		err = get("http://127.0.0.1:" + ports[3] + "/debug/pprof/heap?gc=1")
		m, merr := metrics(d.MetricsAddr)
		rss := rssBytes(d.PID())
		d.Stop()
		if err != nil || merr != nil {
			return fmt.Errorf("%s: %v %v", run.name, err, merr)
		}
		res = append(res, result{ready: ready, heap: m["go_memstats_heap_inuse_bytes"], rss: rss, name: run.name})
		fmt.Printf("%-28s ready in %v, heap in use %.1f MiB, RSS %.1f MiB\n", run.name, ready.Round(time.Millisecond), res[len(res)-1].heap/(1<<20), rss/(1<<20))
	}
	perRecord := func(loaded, empty result) float64 { return (loaded.heap - empty.heap) / float64(records) }
	g, k := perRecord(res[2], res[0]), perRecord(res[3], res[1])
	s := section{
		title: "Scale and memory",
		intro: fmt.Sprintf("%d global services x 4 clusters (the local headless Service and 3 mirrors) x 3 endpoints = %d records, "+
			"as %d Services and %d EndpointSlices in one namespace, loaded in %v. Each plugin starts alone in a `bin/coredns`, "+
			"watching that namespace; its baseline is the same before the load. Ready = process start to `/ready` 200; heap in "+
			"use after a forced GC (`/debug/pprof/heap?gc=1`), RSS from /proc; bytes per record = (heap - baseline heap) / records.",
			o.services, records, o.services*4, o.services*4, loaded.Round(time.Second)),
		header: []string{"Plugin", "Ready after start", "Heap in use", "RSS", "Bytes per record"},
	}
	for i, x := range res {
		per := ""
		switch i {
		case 2:
			per = fmt.Sprintf("%.0f", g)
		case 3:
			per = fmt.Sprintf("%.0f", k)
		}
		s.rows = append(s.rows, []string{x.name, x.ready.Round(time.Millisecond).String(), fmt.Sprintf("%.1f MiB", x.heap/(1<<20)), fmt.Sprintf("%.1f MiB", x.rss/(1<<20)), per})
	}
	r.add(s)
	r.goal(fmt.Sprintf("Memory per record at %dk records", records/1000), "≤ 0.5 KB", fmt.Sprintf("%.0f bytes (the kubernetes plugin: %.0f)", g, k))
	r.goal(fmt.Sprintf("Ready after start, %d global services", o.services), "≤ 2 s", fmt.Sprintf("%v (the kubernetes plugin: %v)", res[2].ready.Round(time.Millisecond), res[3].ready.Round(time.Millisecond)))
	return nil
}

// loadScale creates n global services: a local selector-less headless Service and three mirrors,
// each with one EndpointSlice of three endpoints, as the mirroring controller would write them.
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

func scaleMember(ctx context.Context, c kubernetes.Interface, i, ci int, cluster string) error {
	global := fmt.Sprintf("s%d", i)
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
	for e := range 3 {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 100+ci*4+e, i/256, i%256)},
			Hostname:   ptr.To(fmt.Sprintf("%s-%d", global, e)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	_, err := c.DiscoveryV1().EndpointSlices(scaleNS).Create(ctx, es, metav1.CreateOptions{})
	return err
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

// micro runs the Go micro-benchmarks of the query path and of an index update.
func micro(ctx context.Context, _ *harness.ControlPlane, _ options, r *report) error {
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "./plugin/global/"}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "cpu:") {
			keep = append(keep, l)
		}
	}
	fmt.Println(strings.Join(keep, "\n"))
	r.add(section{
		title: "Micro-benchmarks",
		intro: "`go test -run '^$' -bench . -benchmem ./plugin/global/`: `ServeDNS` for every name form (the reply is built, not " +
			"sent), and one index update (a global service rebuilt and a snapshot published) among 10,000 global services.",
		after: strings.Join(keep, "\n") + "\n",
	})
	return nil
}
