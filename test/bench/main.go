// Command bench is `make bench`: it measures bin/coredns with the global plugin next to CoreDNS's
// own whoami, file and kubernetes plugins, in one run on one machine, against a real control
// plane, and writes the results to docs/benchmarks.md. It reports; it asserts nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/globaldns/global/test/harness"
)

type options struct {
	rounds   int
	duration time.Duration
	changes  int
	// compareChanges is the changes of each EndpointSlice update row: their plugin shares' p99s
	// are compared, and a p99 of 200 is the second largest, a matter of luck.
	compareChanges int
	services       int
	// largeServices is the scale step's large point, without per-pod mirrors (0: none).
	largeServices int
	out           string
	only          string // run only the steps whose names contain this
	work          string // scratch directory
	// corednsEnv is added to the environment of the scale step's coredns processes, to compare
	// settings (e.g. GOGC=200).
	corednsEnv []string
	profiles   string // where the scale step saves each coredns's heap profile, heap-<run>.pb.gz
	// compare is a commit whose ServeDNS benchmarks are compared with this build's, each one
	// ("": no such step).
	compare string
}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds of every dnsperf case (medians are reported)")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "length of one dnsperf throughput run")
	// 200: a p99 of 50 changes is their largest one; of 200, the second largest.
	flag.IntVar(&o.changes, "changes", 200, "changes per programming-latency scenario")
	flag.IntVar(&o.compareChanges, "compare-changes", 1000, "changes per EndpointSlice update scenario (10 and 10,000 endpoints, compared)")
	// 2,000: with a per-pod mirror (a ClusterIP Service) per mirror record, 10,000 take the API
	// server here over an hour to load (ClusterIP allocation slows as ClusterIPs add up); the
	// large point has none, and the micro step measures 120k records with them in process.
	flag.IntVar(&o.services, "services", 2000, "global services in the scale test's point with per-pod mirrors (x 4 clusters x 3 endpoints)")
	flag.IntVar(&o.largeServices, "large-services", 10000, "global services in the scale test's large point, without per-pod mirrors (x 4 clusters x 3 endpoints; 0 skips it)")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "where to write the report")
	flag.StringVar(&o.only, "only", "", "run only the steps whose names contain this (micro, baseline, compare, throughput, ranked, programming, scale)")
	flag.Func("coredns-env", "KEY=VALUE added to the scale step's coredns environment (repeatable)", func(v string) error {
		o.corednsEnv = append(o.corednsEnv, v)
		return nil
	})
	flag.StringVar(&o.compare, "compare", "", "compare every ServeDNS benchmark with this commit's (a step of its own, off without it)")
	flag.StringVar(&o.profiles, "profiles", "", "save the scale step's heap profiles (heap-<run>.pb.gz) in this directory")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	var err error
	if o.work, err = os.MkdirTemp("", "globaldns-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(o.work)

	r := newReport(o)
	// The Go benchmarks run first, before the control plane starts. They need none, and a
	// starting API server takes a share of two cores for about a minute: ServeDNS measured
	// 10-15% slower beside one. Later the control plane holds the scale step's 52,000 objects,
	// and their upkeep takes a share too. The control plane starts with the first step that uses it.
	var cp *harness.ControlPlane
	for _, step := range []struct {
		name           string
		run            func(context.Context, *harness.ControlPlane, options, *report) error
		noControlPlane bool
		off            bool // a step asked for by a flag
	}{
		{"micro: Go benchmarks", micro, true, false},
		{"baseline: the plain names against " + baselineCommit, baseline, true, false},
		{"compare: every ServeDNS benchmark against -compare", compare, true, o.compare == ""},
		{"throughput: queries per second and latency", throughput, false, false},
		{"ranked: answers ranked from the client, and zonal names", ranked, false, false},
		{"programming: change to answer, and writer cost", programming, false, false},
		{"scale: memory and time to ready", scale, false, false},
	} {
		if !strings.Contains(step.name, o.only) || step.off {
			continue
		}
		if cp == nil && !step.noControlPlane {
			fmt.Println("starting the control plane ...")
			if cp, err = harness.StartControlPlane(ctx, harness.Options{Dir: filepath.Join(o.work, "controlplane")}); err != nil {
				return err
			}
			defer cp.Stop()
		}
		fmt.Printf("\n== %s\n", step.name)
		if err := step.run(ctx, cp, o, r); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	r.elapsed = time.Since(start)
	text := r.markdown()
	fmt.Println("\n" + text)
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(o.out, []byte(text), 0o644)
}

// render fills a Corefile from a template with the given ports and paths.
func render(tmpl string, kv ...string) string {
	return strings.NewReplacer(kv...).Replace(tmpl)
}
