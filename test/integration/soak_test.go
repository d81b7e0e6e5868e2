package integration

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/history"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

var (
	soakFor = flag.Duration("soak", 0, "TestSoak: run the random history under load this long (make soak); 0 skips it")
	soakOut = flag.String("soak-out", "", "TestSoak: write the report (Markdown) to this file")
)

// soakLoad is what TestSoak's client sends: A queries for the global services of the last
// quiet point, about 2000 a second, to one replica and, when it does not answer or fails
// (SERVFAIL), to the other, as a pod's resolver does with two nameservers.
const (
	soakWorkers  = 20
	soakInterval = 10 * time.Millisecond // per worker
	soakEvery    = 10 * time.Second
)

// TestSoak runs TestRandomHistory's history and faults for as long as -soak says, under load,
// and samples each replica's resources: it reports growth after a warm-up, failed queries,
// the steps that did not converge and the API writes per change. Replica 0 is never replaced,
// so its series spans the run.
func TestSoak(t *testing.T) {
	// Serial: it is the machine's load.
	if *soakFor == 0 {
		t.Skip("the soak runs with make soak (-soak DURATION)")
	}
	cp := harness.Start(t)
	history.CreateNodes(t, cp.Client)
	seed := *historySeed
	if seed < 0 {
		seed = time.Now().Unix() % 1000
	}
	h := history.New(t, cp, seed, 60, true)
	writes := countWrites(t, cp, h)

	var names atomic.Pointer[[]string]
	setNames := func() {
		n, err := h.Names()
		if err != nil {
			return
		}
		if len(n) == 0 {
			n = []string{"nothing.h.global."}
		}
		names.Store(&n)
	}
	setNames()
	var sent, failed atomic.Int64
	var failures sync.Map // why -> count
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Go(func() {
			tick := time.NewTicker(soakInterval)
			defer tick.Stop()
			for n := w; ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				list := *names.Load()
				replicas := h.Replicas()
				sent.Add(1)
				if why := askEither(replicas[n%2], replicas[1-n%2], list[n%len(list)], []string{"udp", "tcp"}[n/2%2]); why != "" {
					failed.Add(1)
					v, _ := failures.LoadOrStore(why, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
			}
		})
	}
	samples := map[string][]soakSample{}
	var sampleMu sync.Mutex
	wg.Go(func() {
		tick := time.NewTicker(soakEvery)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i, c := range h.Replicas() {
				s, ok := sampleProcess(c, time.Since(start))
				if !ok {
					continue
				}
				key := fmt.Sprintf("replica %d, pid %d", i, c.PID())
				sampleMu.Lock()
				samples[key] = append(samples[key], s)
				sampleMu.Unlock()
			}
		}
	})

	start := time.Now()
	steps := 0
	for ; time.Since(start) < *soakFor; steps++ {
		h.Step(steps)
		setNames()
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)

	var why []string
	failures.Range(func(k, v any) bool {
		why = append(why, fmt.Sprintf("%d × %s", v.(*atomic.Int64).Load(), k))
		return true
	})
	slices.Sort(why)
	report := soakReport(seed, elapsed, steps, h, sent.Load(), failed.Load(), why, writes.Load(), samples)
	t.Log("\n" + report)
	if *soakOut != "" {
		testkit.Must(t, os.WriteFile(*soakOut, []byte(report), 0o644))
	}
	if failed.Load() > 0 || len(h.Mismatches()) > 0 {
		t.Errorf("%d queries failed, %d steps did not converge", failed.Load(), len(h.Mismatches()))
	}
}

// askEither asks a, then b when a does not answer or answers SERVFAIL; it returns why both
// failed, or "".
func askEither(a, b *harness.CoreDNS, qname, proto string) string {
	var why string
	for _, c := range []*harness.CoreDNS{a, b} {
		m := new(dns.Msg)
		m.SetQuestion(qname, dns.TypeA)
		r, _, err := (&dns.Client{Net: proto, Timeout: time.Second}).Exchange(m, c.Addr)
		switch {
		case err != nil:
			why = proto + ": no answer"
		case r.Rcode == dns.RcodeServerFailure:
			why = proto + ": SERVFAIL"
		case r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError:
			return proto + ": " + dns.RcodeToString[r.Rcode]
		default:
			return ""
		}
	}
	return why
}

// countWrites counts the API writes to the objects the writer owns in the history's
// namespaces (creations, changes of resourceVersion, deletions), from an informer of its own.
func countWrites(t *testing.T, cp *harness.ControlPlane, h *history.History) *atomic.Int64 {
	var n atomic.Int64
	f := informers.NewSharedInformerFactoryWithOptions(cp.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app.kubernetes.io/managed-by=coredns-global" }))
	ours := func(obj any) bool {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		o, ok := obj.(interface{ GetNamespace() string })
		return ok && slices.Contains(h.Namespaces(), o.GetNamespace())
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ours(obj) {
				n.Add(1)
			}
		},
		UpdateFunc: func(old, obj any) {
			if ours(obj) && old.(interface{ GetResourceVersion() string }).GetResourceVersion() != obj.(interface{ GetResourceVersion() string }).GetResourceVersion() {
				n.Add(1)
			}
		},
		DeleteFunc: func(obj any) {
			if ours(obj) {
				n.Add(1)
			}
		},
	}
	_, err := f.Discovery().V1().EndpointSlices().Informer().AddEventHandler(handler)
	testkit.Must(t, err)
	_, err = f.Core().V1().Services().Informer().AddEventHandler(handler)
	testkit.Must(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.Start(stop)
	f.WaitForCacheSync(stop)
	return &n
}

// soakSample is one look at a process.
type soakSample struct {
	at                                 time.Duration
	rss, heap, goroutines, descriptors float64
}

// sampleProcess reads a replica's resident set and descriptors from /proc and its heap and
// goroutines from its metrics.
func sampleProcess(c *harness.CoreDNS, at time.Duration) (soakSample, bool) {
	s := soakSample{at: at}
	rss, ok := c.RSS()
	if !ok {
		return s, false
	}
	s.rss = rss
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.PID()))
	if err != nil {
		return s, false
	}
	s.descriptors = float64(len(fds))
	m, err := scrape(c.MetricsAddr)
	if err != nil {
		return s, false
	}
	s.heap, s.goroutines = m["go_memstats_heap_inuse_bytes"], m["go_goroutines"]
	return s, true
}

// scrape reads a Prometheus text page into sample -> value.
func scrape(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && !strings.HasPrefix(l, "#") {
			out[k], _ = strconv.ParseFloat(v, 64)
		}
	}
	return out, nil
}

// slope is the least-squares growth per hour of a process's samples after its warm-up.
func slope(ss []soakSample, warmup time.Duration, value func(soakSample) float64) (float64, int) {
	var xs, ys []float64
	for _, s := range ss {
		if s.at-ss[0].at >= warmup {
			xs, ys = append(xs, s.at.Hours()), append(ys, value(s))
		}
	}
	if len(xs) < 3 {
		return math.NaN(), len(xs)
	}
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(xs))
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	return num / den, len(xs)
}

func soakReport(seed int64, elapsed time.Duration, steps int, h *history.History, sent, failed int64, why []string, writes int64, samples map[string][]soakSample) string {
	var b strings.Builder
	warmup := min(5*time.Minute, elapsed/4).Round(time.Second)
	fmt.Fprintf(&b, "# Soak\n\nOne run of `make soak` (`go test ./test/integration -run '^TestSoak$' -soak %s`, seed %d), %s, on %s.\n\n",
		soakFor.String(), seed, time.Now().UTC().Format("2006-01-02"), machine())
	fmt.Fprintf(&b, "TestRandomHistory's random history and faults, one step after another, against two bin/coredns replicas (writer on), checked against its oracle after every step, under about %d queries a second (A, UDP and TCP, to one replica and to the other when the first does not answer or fails), with each replica's resident set, Go heap in use, goroutines and open descriptors sampled every %s. Replica 0 is never replaced; replica 1 is killed or stopped by the faults. Growth is the least-squares slope over each process's samples after its first %s (the warm-up); the goroutines are mostly the reflectors of the %d namespaces the Corefile lists.\n\n",
		int(time.Second/soakInterval)*soakWorkers, soakEvery, warmup, len(h.Namespaces()))
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| Steps | %d (%d cluster changes, the rest faults) |\n", steps, h.Changes())
	fmt.Fprintf(&b, "| Queries | %d sent, **%d failed** (%.4f%%) %s |\n", sent, failed, 100*float64(failed)/math.Max(1, float64(sent)), strings.Join(why, ", "))
	fmt.Fprintf(&b, "| Steps that did not converge to the oracle | **%d** %s |\n", len(h.Mismatches()), strings.Join(h.Mismatches(), "; "))
	fmt.Fprintf(&b, "| API writes to our objects per cluster change | %.2f (%d writes; deletions by the namespace controller included) |\n\n", float64(writes)/math.Max(1, float64(h.Changes())), writes)
	fmt.Fprintf(&b, "| Process | Samples | Resident set (MiB), first → last | per hour | Go heap in use (MiB) | per hour | Goroutines | per hour | Descriptors | per hour |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, key := range slices.Sorted(maps.Keys(samples)) {
		ss := samples[key]
		if len(ss) < 2 {
			continue
		}
		first, last := ss[0], ss[len(ss)-1]
		cell := func(v func(soakSample) float64, unit float64, f string) string {
			s, n := slope(ss, warmup, v)
			if n < 3 {
				return fmt.Sprintf(f+" → "+f+" | —", v(first)/unit, v(last)/unit)
			}
			return fmt.Sprintf(f+" → "+f+" | "+strings.Replace(f, "%", "%+", 1), v(first)/unit, v(last)/unit, s/unit)
		}
		fmt.Fprintf(&b, "| %s | %d, %s to %s | %s | %s | %s | %s |\n", key, len(ss), first.at.Round(time.Second), last.at.Round(time.Second),
			cell(func(s soakSample) float64 { return s.rss }, 1<<20, "%.1f"),
			cell(func(s soakSample) float64 { return s.heap }, 1<<20, "%.1f"),
			cell(func(s soakSample) float64 { return s.goroutines }, 1, "%.0f"),
			cell(func(s soakSample) float64 { return s.descriptors }, 1, "%.0f"))
	}
	return b.String()
}

func machine() string {
	return fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), runtime.Version())
}
