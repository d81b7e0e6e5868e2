package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/test/harness"

	"k8s.io/client-go/kubernetes"
)

// One bin/coredns serves every plugin measured, on one port, each in its zone.
const throughputCorefile = `whoami.test:PORT {
    bind 127.0.0.1
    whoami
}
file.test:PORT {
    bind 127.0.0.1
    file ZONEFILE file.test
}
cluster.local:PORT {
    bind 127.0.0.1
    kubernetes cluster.local {
        kubeconfig KUBECONFIG
        namespaces db
    }
}
global:PORT {
    bind 127.0.0.1
    global {
        kubeconfig KUBECONFIG
        namespaces db
        endpointslices off
        cluster east
        locality east zone=us-east-1a region=us-east-1
        locality west zone=us-east-1b region=us-east-1
    }
}
`

type perfCase struct {
	name, qname, qtype, proto string
}

var perfCases = []perfCase{
	{"whoami", "a.whoami.test", "A", "udp"},
	{"file: 3 A", "r3.file.test", "A", "udp"},
	{"kubernetes: 3 A (headless mirror r3-west)", "r3-west.db.svc.cluster.local", "A", "udp"},
	{"global: 3 A", "r3.db.global", "A", "udp"},
	{"global: 30 A", "r30.db.global", "A", "udp"},
	{"global: 300 A over TCP", "r300.db.global", "A", "tcp"},
	{"global: SRV, 3 targets", "_db._tcp.r3.db.global", "SRV", "udp"},
	{"global: per-pod name", "r3-0.west.r3.db.global", "A", "udp"},
	{"global: NXDOMAIN", "nope.db.global", "A", "udp"},
}

type perfResult struct{ qps, mean, p50, p99 []float64 }

func throughput(ctx context.Context, cp *harness.ControlPlane, o options, r *report) error {
	if _, err := exec.LookPath("dnsperf"); err != nil {
		return fmt.Errorf("dnsperf is not installed (make bench installs it): %w", err)
	}
	zonefile, err := throughputFixtures(ctx, cp.Client, o)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	corefile := render(throughputCorefile, "PORT", port, "ZONEFILE", zonefile, "KUBECONFIG", cp.Kubeconfig)
	dns, err := harness.StartCoreDNSProcess(corefile, filepath.Join(o.work, "coredns-throughput"), nil)
	if err != nil {
		return err
	}
	defer dns.Stop()
	if err := waitAnswers(ctx, dns.Addr, "r300.db.global.", 300); err != nil {
		return err
	}
	results, err := throughputRounds(ctx, o, dns.Addr)
	if err != nil {
		return err
	}
	s := section{
		title: "Query throughput and latency",
		intro: fmt.Sprintf("dnsperf 20 clients, 2 threads, EDNS, %v per run, with no rate limit (QPS, mean latency); then 3 s at 2,000 "+
			"queries/s with per-query timing (p50, p99). %d interleaved rounds, medians. One `bin/coredns` serves every row, on one port.",
			o.duration, o.rounds),
		header: []string{"Case", "Query", "QPS", "Mean latency", "p50 @2k qps", "p99 @2k qps", "QPS / whoami"},
	}
	whoami := median(results[0].qps)
	for i, pc := range perfCases {
		q := median(results[i].qps)
		s.rows = append(s.rows, []string{pc.name, fmt.Sprintf("`%s %s` (%s)", pc.qname, pc.qtype, pc.proto), fmt.Sprintf("%.0f", q),
			ms(median(results[i].mean)), ms(median(results[i].p50)), ms(median(results[i].p99)), fmt.Sprintf("%.2f", q/whoami)})
	}
	r.add(s)
	ours, kube := median(results[3].qps), median(results[2].qps)
	r.goal("Throughput vs whoami (3 A records)", "≥ 0.95", fmt.Sprintf("%.2f (%.0f vs %.0f QPS)", ours/whoami, ours, whoami))
	r.goal("Throughput vs the kubernetes plugin (the same 3 records)", "≥ 1.4", fmt.Sprintf("%.2f (%.0f vs %.0f QPS)", ours/kube, ours, kube))
	return nil
}

// throughputFixtures makes the step's mirrors in namespace db, and the zone file that serves r3's
// records to the file plugin: its path.
func throughputFixtures(ctx context.Context, c kubernetes.Interface, o options) (string, error) {
	if err := harness.EnsureNamespace(ctx, c, "db"); err != nil {
		return "", err
	}
	ports := []harness.Port{{Name: "db", Port: 5432, TargetPort: 15432}}
	mirror := func(svc, cluster string, n int) (*harness.MirrorObjects, error) {
		m := harness.Mirror{Namespace: "db", Service: svc, Cluster: cluster, Ports: ports}
		for i := range n {
			m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("%s-%d", svc, i), Ready: true})
		}
		return harness.CreateMirror(ctx, c, m)
	}
	r3, err := mirror("r3", "west", 3)
	if err != nil {
		return "", err
	}
	for svc, n := range map[string]int{"r30": 15, "r300": 150} {
		for _, cluster := range []string{"west", "north"} {
			if _, err := mirror(svc, cluster, n); err != nil {
				return "", err
			}
		}
	}
	// The file plugin serves the same three records.
	zone := "$ORIGIN file.test.\n@ 3600 IN SOA ns1.file.test. hostmaster.file.test. 1 7200 1800 86400 5\n@ 3600 IN NS ns1.file.test.\nns1 3600 IN A 127.0.0.1\n"
	for i := range 3 {
		zone += fmt.Sprintf("r3 5 IN A %s\n", r3.ClusterIPs[fmt.Sprintf("r3-%d", i)])
	}
	zonefile := filepath.Join(o.work, "file.test.db")
	return zonefile, os.WriteFile(zonefile, []byte(zone), 0o644)
}

// throughputRounds runs every case at addr, o.rounds interleaved rounds.
func throughputRounds(ctx context.Context, o options, addr string) ([]perfResult, error) {
	results := make([]perfResult, len(perfCases))
	for round := 1; round <= o.rounds; round++ {
		for i, pc := range perfCases { // A B A B: every case once per round
			qps, mean, err := dnsperfRun(ctx, o, addr, pc)
			if err != nil {
				return nil, err
			}
			p50, p99, err := dnsperfLatency(ctx, o, addr, pc)
			if err != nil {
				return nil, err
			}
			res := &results[i]
			res.qps, res.mean = append(res.qps, qps), append(res.mean, mean)
			res.p50, res.p99 = append(res.p50, p50), append(res.p99, p99)
			fmt.Printf("round %d  %-45s %9.0f qps  mean %s  p99 %s\n", round, pc.name, qps, ms(mean), ms(p99))
		}
	}
	return results, nil
}

func queryFile(o options, pc perfCase) (string, error) {
	path := filepath.Join(o.work, strings.NewReplacer(" ", "_", ":", "", "/", "_", ",", "").Replace(pc.name)+".queries")
	return path, os.WriteFile(path, []byte(pc.qname+" "+pc.qtype+"\n"), 0o644)
}

func dnsperfArgs(addr string, pc perfCase, path string) []string {
	host, port, _ := strings.Cut(addr, ":")
	return []string{"-s", host, "-p", port, "-d", path, "-m", pc.proto, "-e", "-c", "20", "-T", "2", "-q", "200"}
}

// dnsperfRun measures the most queries per second, and their mean latency; more are dnsperf's
// flags besides the usual ones.
func dnsperfRun(ctx context.Context, o options, addr string, pc perfCase, more ...string) (qps, mean float64, err error) {
	path, err := queryFile(o, pc)
	if err != nil {
		return 0, 0, err
	}
	args := append(append(dnsperfArgs(addr, pc, path), "-l", strconv.Itoa(int(o.duration.Seconds()))), more...)
	out, err := exec.CommandContext(ctx, "dnsperf", args...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("dnsperf %v: %v\n%s", args, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "Queries per second:"):
			qps, _ = strconv.ParseFloat(f[len(f)-1], 64)
		case strings.HasPrefix(strings.TrimSpace(l), "Average Latency (s):"):
			mean, _ = strconv.ParseFloat(f[3], 64)
		case strings.HasPrefix(strings.TrimSpace(l), "Queries lost:") && !strings.HasPrefix(f[2], "0"):
			fmt.Printf("  (%s: %s)\n", pc.name, strings.TrimSpace(l))
		}
	}
	if qps == 0 {
		return 0, 0, fmt.Errorf("no result from dnsperf %v:\n%s", args, out)
	}
	return qps, mean, nil
}

// dnsperfLatency runs at a fixed 2,000 queries/s and returns the median and 99th percentile of
// the per-query latencies dnsperf reports with -v.
func dnsperfLatency(ctx context.Context, o options, addr string, pc perfCase) (p50, p99 float64, err error) {
	path, err := queryFile(o, pc)
	if err != nil {
		return 0, 0, err
	}
	args := append(dnsperfArgs(addr, pc, path), "-l", "3", "-Q", "2000", "-v")
	cmd := exec.CommandContext(ctx, "dnsperf", args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	var lat []float64
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		// "> NOERROR r3.db.global A 0.000123"
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && f[0] == ">" {
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				lat = append(lat, v)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("dnsperf %v: %w", args, err)
	}
	if len(lat) == 0 {
		return 0, 0, fmt.Errorf("dnsperf -v printed no latencies")
	}
	return quantile(lat, 0.5), quantile(lat, 0.99), nil
}

// waitAnswers polls until qname has n A records over TCP.
func waitAnswers(ctx context.Context, addr, qname string, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if got, _, err := count(addr, qname, "tcp"); err == nil && got == n {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s never had %d records (%d, %v)", qname, n, got, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
