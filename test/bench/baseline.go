package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/globaldns/global/test/harness"
)

// baselineCommit is the build the plain names' query path is held to: issue 46 found it ~10%
// faster than f162abc's (service 434-448 against 477-487 ns, ranges apart), and asked for the
// plain names at or below its times.
const baselineCommit = "191dd5f"

// plainNames are the ServeDNS benchmarks of the plain names compared with the baseline.
var plainNames = []string{"service", "nearest", "srv"}

// baseline compares this build's ServeDNS of the plain names with baselineCommit's, as issue 46
// measured it: both test binaries built here, run alternately on one machine, four rounds.
func baseline(ctx context.Context, _ *harness.ControlPlane, o options, r *report) error {
	bins, err := testBinaries(ctx, o, baselineCommit)
	if err != nil {
		return err
	}
	pattern := "ServeDNS/(" + strings.Join(plainNames, "|") + ")$"
	ns, err := alternate(ctx, bins, pattern)
	if err != nil {
		return err
	}
	s := section{
		title: "The plain names against " + baselineCommit,
		intro: "`go test -c ./plugin/global/` at " + baselineCommit + " and at this build, then `-test.bench '" + pattern +
			"' -test.benchtime 1s` of each, alternately, four rounds (ns/op, medians and ranges); and the instructions per query, " +
			"which do not drift with the machine: callgrind (`GODEBUG=asyncpreemptoff=1 GOGC=off valgrind --tool=callgrind`) counting " +
			"each benchmark at 20,000 and at 40,000 queries, the difference over 20,000.",
		header: comparedHeader(baselineCommit),
	}
	var ratios, iratios []string
	for _, b := range plainNames {
		if base, head := ns["base"][b], ns["head"][b]; len(base) == 0 || len(head) == 0 {
			return fmt.Errorf("no %s result (base %v, head %v)", b, base, head)
		}
		c, err := compareOne(ctx, bins, ns, b, 1)
		if err != nil {
			return err
		}
		s.rows = append(s.rows, c.row)
		ratios = append(ratios, fmt.Sprintf("%s %.2f", b, c.time))
		iratios = append(iratios, fmt.Sprintf("%s %.3f (%d vs %d)", b, c.instructions, c.ih, c.ib))
	}
	r.add(s)
	r.goal("ServeDNS of the plain names (service, nearest, srv) against "+baselineCommit+", both built here, alternating", "≤ 1.00× each",
		"time "+strings.Join(ratios, ", ")+"; instructions "+strings.Join(iratios, ", "))
	return nil
}

// comparedHeader is the header of a table of compareOne's rows against base.
func comparedHeader(base string) []string {
	return []string{"Name", base, "this build", "this / " + base, "instructions " + base, "this build", "this / " + base}
}

// compared is one benchmark of the base and head binaries: its table row, and head's time and
// instructions per query over base's.
type compared struct {
	row                []string
	time, instructions float64
	ib, ih             int64
}

// compareOne compares benchmark b of bins, its times in ns (alternate's) and its instructions per
// query (of runs callgrind runs at each count).
func compareOne(ctx context.Context, bins map[string]string, ns map[string]map[string][]float64, b string, runs int) (compared, error) {
	base, head := ns["base"][b], ns["head"][b]
	ib, err := instructions(ctx, bins["base"], b, runs)
	if err != nil {
		return compared{}, err
	}
	ih, err := instructions(ctx, bins["head"], b, runs)
	if err != nil {
		return compared{}, err
	}
	c := compared{time: median(head) / median(base), instructions: float64(ih) / float64(ib), ib: ib, ih: ih}
	c.row = []string{b, spread(base), spread(head), fmt.Sprintf("%.2f", c.time), fmt.Sprint(ib), fmt.Sprint(ih), fmt.Sprintf("%.3f", c.instructions)}
	return c, nil
}

// testBinaries builds the test binaries of ./plugin/global at commit (from git archive) and of
// this build: their paths, by "base" and "head".
func testBinaries(ctx context.Context, o options, commit string) (map[string]string, error) {
	src := filepath.Join(o.work, "src-"+commit)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", "git archive "+commit+" | tar -x -C "+src)
	if out, err := archive.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("the source of %s: %v\n%s", commit, err, out)
	}
	bins := map[string]string{"base": filepath.Join(o.work, commit+".test"), "head": filepath.Join(o.work, "head.test")}
	for name, dir := range map[string]string{"base": src, "head": "."} {
		if _, err := os.Stat(bins[name]); err == nil {
			continue // built by an earlier step of this run (head.test by baseline's, for compare)
		}
		build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bins[name], "./plugin/global/")
		build.Dir = dir
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go test -c (%s): %v\n%s", name, err, out)
		}
	}
	return bins, nil
}

// alternate runs the benchmarks of pattern of each binary in turn, four rounds (the machine's
// drift hits both), and returns their ns/op by binary and benchmark.
func alternate(ctx context.Context, bins map[string]string, pattern string) (map[string]map[string][]float64, error) {
	ns := map[string]map[string][]float64{"base": {}, "head": {}}
	for round := 1; round <= 4; round++ {
		for _, name := range []string{"base", "head"} {
			out, err := exec.CommandContext(ctx, bins[name], "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", "1s").Output()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", bins[name], err)
			}
			for _, l := range strings.Split(string(out), "\n") {
				f := strings.Fields(l)
				if len(f) < 3 || !strings.HasPrefix(f[0], "BenchmarkServeDNS/") {
					continue
				}
				bench := strings.TrimPrefix(f[0], "BenchmarkServeDNS/")
				bench = bench[:strings.LastIndexByte(bench, '-')] // -GOMAXPROCS
				if v, err := strconv.ParseFloat(f[2], 64); err == nil {
					ns[name][bench] = append(ns[name][bench], v)
				}
			}
			fmt.Printf("round %d  %s: %v\n", round, name, ns[name])
		}
	}
	return ns, nil
}

// instructions counts the instructions per query of ServeDNS benchmark name in test binary bin:
// callgrind at 20,000 and at 40,000 queries, the difference over 20,000 (what the binary does
// besides, start-up and set-up, cancels), the median of runs counts at each: a process's hash
// seeds and the allocator's slow paths move a count by up to 80 instructions a query (the least
// of two runs still moved client-10000's by 1.4 %). Go's asynchronous preemption signals trip
// callgrind.
func instructions(ctx context.Context, bin, name string, runs int) (int64, error) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		return 0, fmt.Errorf("valgrind is not installed (make bench installs it): %w", err)
	}
	count := func(n int) (int64, error) {
		cmd := exec.CommandContext(ctx, "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", bin,
			"-test.run", "^$", "-test.bench", "ServeDNS/"+name+"$", "-test.benchtime", fmt.Sprintf("%dx", n), "-test.cpu", "1")
		cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1", "GOGC=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("callgrind %s %s: %v\n%s", bin, name, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if _, refs, ok := strings.Cut(l, "I   refs:"); ok {
				return strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(refs), ",", ""), 10, 64)
			}
		}
		return 0, fmt.Errorf("callgrind %s %s printed no count:\n%s", bin, name, out)
	}
	typical := func(n int) (int64, error) {
		var cs []int64
		for range runs {
			c, err := count(n)
			if err != nil {
				return 0, err
			}
			cs = append(cs, c)
		}
		slices.Sort(cs)
		return cs[len(cs)/2], nil
	}
	a, err := typical(20000)
	if err != nil {
		return 0, err
	}
	b, err := typical(40000)
	if err != nil {
		return 0, err
	}
	return (b - a) / 20000, nil
}

// spread renders a median and the range of xs, in ns.
func spread(xs []float64) string {
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%.0f (%.0f-%.0f)", median(xs), lo, hi)
}
