package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

// report collects what every step measured and renders it as markdown.
type report struct {
	o        options
	machine  []string
	sections []section
	goals    []goal
	elapsed  time.Duration
}

type section struct {
	title, intro string
	header       []string
	rows         [][]string
	after        string // preformatted text (micro-benchmarks)
}

// goal is one of the targets next to what was measured.
type goal struct{ what, target, measured string }

func newReport(o options) *report {
	r := &report{o: o}
	r.machine = append(r.machine,
		fmt.Sprintf("CPU: %s, %d cores", cpuModel(), runtime.NumCPU()),
		"Memory: "+firstField("/proc/meminfo", "MemTotal:"),
		"Kernel: "+strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		"Go: "+runtime.Version(),
		"CoreDNS: v1.15.0 (bin/coredns, `make build`)",
		"Commit: "+commit(),
		"Control plane: kube-apiserver and kube-controller-manager "+kubeVersion()+", etcd v3.6.6 (`make controlplane`), on loopback",
		"dnsperf: "+strings.TrimSpace(shell("dnsperf -h 2>&1 | grep Version")),
	)
	return r
}

func (r *report) add(s section) { r.sections = append(r.sections, s) }

func (r *report) goal(what, target, measured string) {
	r.goals = append(r.goals, goal{what, target, measured})
}

func (r *report) markdown() string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `make bench` (`go run ./test/bench`). Every figure comes from one run on one machine: the\n")
	b.WriteString("plugin next to CoreDNS's own plugins in the same `bin/coredns`, against a real etcd, kube-apiserver\n")
	b.WriteString("and kube-controller-manager on loopback. Absolute numbers on a shared 2-core machine drift from run to\n")
	b.WriteString("run (dnsperf and coredns share the cores); the ratios are the result.\n\n")
	fmt.Fprintf(&b, "Run: `make bench` (rounds %d, %v per throughput run, %d changes per scenario and %d per EndpointSlice update scenario, %d and %d global services in the scale test), %v in all, %s.\n\n",
		r.o.rounds, r.o.duration, r.o.changes, r.o.compareChanges, r.o.largeServices, r.o.services, r.elapsed.Round(time.Second), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	b.WriteString("## Machine\n\n")
	for _, m := range r.machine {
		b.WriteString("- " + m + "\n")
	}
	b.WriteString("\n## Goals\n\n| What | Goal | Measured |\n|---|---|---|\n")
	for _, g := range r.goals {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g.what, g.target, g.measured)
	}
	for _, s := range r.sections {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", s.title, s.intro)
		if len(s.header) > 0 {
			b.WriteString("\n| " + strings.Join(s.header, " | ") + " |\n|" + strings.Repeat("---|", len(s.header)) + "\n")
			for _, row := range s.rows {
				b.WriteString("| " + strings.Join(row, " | ") + " |\n")
			}
		}
		if s.after != "" {
			b.WriteString("\n```\n" + s.after + "```\n")
		}
	}
	return b.String()
}

// kubeVersion is the pinned Kubernetes version, from the module that builds the control plane.
func kubeVersion() string {
	for _, l := range strings.Split(readFile("test/controlplane/kube/go.mod"), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "require" && f[1] == "k8s.io/kubernetes" {
			return f[2]
		}
	}
	return "?"
}

func cpuModel() string { return firstField("/proc/cpuinfo", "model name") }

func firstField(path, prefix string) string {
	for _, l := range strings.Split(readFile(path), "\n") {
		if strings.HasPrefix(l, prefix) {
			_, v, _ := strings.Cut(l, ":")
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// commit names the build measured: the commit, and whether the work tree differs from it.
func commit() string {
	c := strings.TrimSpace(shell("git rev-parse --short HEAD"))
	if strings.TrimSpace(shell("git status --porcelain --untracked-files=no")) != "" {
		c += " with uncommitted changes"
	}
	return c
}

func shell(cmd string) string {
	out, _ := exec.Command("sh", "-c", cmd).Output()
	return string(out)
}

// quantile returns the q-quantile (0..1) of xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}

func median(xs []float64) float64 { return quantile(xs, 0.5) }

func ms(d float64) string { return fmt.Sprintf("%.2f ms", d*1000) }
