package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/globaldns/global/test/harness"
)

// micro runs the Go micro-benchmarks of the query path and of an index update, the writer's
// sync, and the in-process memory benchmarks.
func micro(ctx context.Context, _ *harness.ControlPlane, _ options, r *report) error {
	serve, err := goTest(ctx, nil, "-bench", ".", "-benchmem", "-count", "3", "./plugin/global/")
	if err != nil {
		return err
	}
	// Publishing again without the garbage collector: what of its time the collector takes.
	noGC, err := goTest(ctx, []string{"GOGC=off"}, "-bench", "Publish", "-benchmem", "-count", "3", "./plugin/global/")
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
	serveGoals(r, serve)
	publishGoals(r, serve, noGC)
	if err := writerSync(ctx, r); err != nil {
		return err
	}
	return memory(ctx, r)
}

// goTest runs `go test -run '^$'` with args, env added to its environment, and returns (and
// prints) its benchmark lines.
func goTest(ctx context.Context, env []string, args ...string) ([]string, error) {
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

// medianOf is the median of metric unit of benchmark name (not of a longer name: srv is not
// srv-10000) in out, "?" without one.
func medianOf(out []string, name, unit string) string {
	var lines []string
	for _, l := range out {
		if rest, ok := strings.CutPrefix(l, name+"-"); ok && isGOMAXPROCS(rest) {
			lines = append(lines, l)
		}
	}
	if v := benchMetric(lines, unit); len(v) > 0 {
		return strconv.FormatFloat(quantile(v, .5), 'f', -1, 64)
	}
	return "?"
}

// ratio is a/b of two medians, "?" when either is; to two places, so that 1.33 does not read as a
// goal of 1.3 met.
func ratio(a, b string) string {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	if errA != nil || errB != nil || y == 0 {
		return "?"
	}
	return strconv.FormatFloat(x/y, 'f', 2, 64)
}

// serveGoals reports the goals of ServeDNS from its benchmarks' lines.
func serveGoals(r *report, serve []string) {
	median := func(name, unit string) string { return medianOf(serve, name, unit) }
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
}

// publishGoals reports the goals of an index update, from the benchmarks' lines with and without
// the garbage collector.
func publishGoals(r *report, serve, noGC []string) {
	median := func(name, unit string) string { return medianOf(serve, name, unit) }
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
}

// writerSync runs the writer's benchmark and reports it.
func writerSync(ctx context.Context, r *report) error {
	sync, err := goTest(ctx, nil, "-bench", "Sync", "-benchmem", "-count", "3", "./plugin/global/writer/")
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
	return nil
}

// memory runs the in-process memory benchmarks (and the start-up work of the scale one) and
// reports them.
func memory(ctx context.Context, r *report) error {
	mem, err := goTest(ctx, nil, "-bench", "Scale", "-benchtime", "1x", "-count", "3", "./plugin/global/watch/")
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
	if err := podMemory(ctx, r); err != nil {
		return err
	}
	if err := rankedMemory(ctx, r); err != nil {
		return err
	}
	msAt := func(n string) string { return fmt.Sprintf("%.0f", quantile(at(n, "ns/op"), .5)/1e6) }
	r.goal("Start-up work in process, 1k / 10k / 100k global services (lists to published index, median of 3)", "grows linearly",
		fmt.Sprintf("%s / %s / %s ms", msAt("1000"), msAt("10000"), msAt("100000")))
	return nil
}

// podMemory reports the memory of the pod source's table.
func podMemory(ctx context.Context, r *report) error {
	pods, err := goTest(ctx, nil, "-bench", "PodTable", "-benchtime", "1x", "-count", "3", "./plugin/global/watch/")
	if err != nil {
		return err
	}
	perPod := benchMetric(pods, "live-B/pod")
	if len(perPod) == 0 {
		return fmt.Errorf("no live-B/pod in %q", pods)
	}
	r.goal("Memory per watched Pod at 100k Pods (client_locality pod; in process: `go test -bench PodTable ./plugin/global/watch/`)", "≤ 150 B",
		fmt.Sprintf("live %.0f bytes (median of %d)", quantile(perPod, .5), len(perPod)))
	return nil
}

// rankedMemory reports what answers ranked from clients keep beside a service.
func rankedMemory(ctx context.Context, r *report) error {
	out, err := goTest(ctx, nil, "-bench", "RankedMemory", "-benchtime", "1x", "-count", "3", "./plugin/global/index/")
	if err != nil {
		return err
	}
	placed, memo := benchMetric(out, "placed-B/record"), benchMetric(out, "memo-B/answer")
	if len(placed) == 0 || len(memo) == 0 {
		return fmt.Errorf("no placed-B/record or memo-B/answer in %q", out)
	}
	// No issue set a goal for this memory: it is reported, as issue 46 asks, not held to one.
	r.add(section{
		title: "Memory of answers ranked from the client",
		intro: fmt.Sprintf("`go test -run '^$' -bench RankedMemory -benchtime 1x -count 3 ./plugin/global/index/`: beside a local service "+
			"of 10,000 endpoints on 100 nodes over 3 zones, what ranked answers keep (live heap after a full GC): its records grouped by "+
			"node and zone, %.0f B per record (`placed-B/record`), and each remembered answer of 100 records (what a 512-byte reply is read "+
			"for), %.0f B (`memo-B/answer`), up to 64 per version of the service. Medians of %d.", quantile(placed, .5), quantile(memo, .5), len(placed)),
		after: strings.Join(out, "\n") + "\n",
	})
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
