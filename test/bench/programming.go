package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/globaldns/global/test/harness"

	"k8s.io/client-go/kubernetes"
)

const programmingCorefile = `global:PORT near.global:PORT {
    bind 127.0.0.1
    prometheus METRICS
    global global near.global {
        kubeconfig KUBECONFIG
        namespaces prog
        lease prog writer
        cluster east
        policy nearest near.global
    }
}
`

const progNS = "prog"

// scenario is one way a global service's endpoints change.
type scenario struct {
	name, svc, cluster string // cluster: where the endpoints are (east: local)
	n                  int    // endpoints
	// flip changes endpoint k's readiness; it returns when it wrote what the answer follows (zero:
	// when it was called).
	flip func(ctx context.Context, k int, ready bool) (time.Time, error)
	gone bool // an endpoint that is not ready leaves the written slices (a mirror's)
}

func (s scenario) host(k int) string { return fmt.Sprintf("%s-%d", s.svc, k) }

func programming(ctx context.Context, cp *harness.ControlPlane, o options, r *report) error {
	c := cp.Client
	scenarios, west, err := programmingFixtures(ctx, c)
	if err != nil {
		return err
	}
	corefile, err := programmingConfig(cp)
	if err != nil {
		return err
	}
	dir := filepath.Join(o.work, "coredns-programming")
	dns1, err := harness.StartCoreDNSProcess(corefile, dir, nil)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			dns1.Stop()
		}
	}()
	res, dnsSec, wSec, err := measureScenarios(ctx, c, dns1, scenarios, o)
	if err != nil {
		return err
	}
	for _, g := range gatewayCases {
		if err := waitAnswers(ctx, dns1.Addr, fmt.Sprintf("%s.%s.global.", g.svc, progNS), g.n); err != nil {
			return err
		}
	}
	gwSec, gwGoals, err := gatewayRows(ctx, c, dns1.Addr, dns1.MetricsAddr)
	if err != nil {
		return err
	}
	foSec, foP99, err := failoverRow(ctx, c, dns1.Addr, west, o.changes)
	if err != nil {
		return err
	}
	stopped = true
	restartWrites, rewritten, err := restartWrites(ctx, c, dns1, corefile, dir+"-restart", len(scenarios)+len(gatewayCases)+1)
	if err != nil {
		return err
	}
	wSec.intro += fmt.Sprintf(" A restart with nothing changed, once the new process led and synced every service: **%.0f writes**.", restartWrites)
	if len(rewritten) > 0 {
		wSec.intro += " Changed: " + strings.Join(rewritten, ", ") + "."
	}
	r.add(dnsSec)
	r.add(gwSec)
	r.add(foSec)
	r.add(wSec)
	res.goals(r, gwGoals, foP99, restartWrites)
	return nil
}

// goals reports the step's goals.
func (res *progResults) goals(r *report, gwGoals []string, foP99 string, restartWrites float64) {
	r.goal("Programming latency p99, 10 and 10,000 endpoints", "≤ 100 ms, the same at both", joinComma(res.p99s))
	r.goal("Programming, the plugin's own share p99: one change in a service of 10,000 endpoints vs 10 (EndpointSlice update)", "≤ 2× the 10-endpoint figure",
		fmt.Sprintf("%s vs %s (%.1f×)", ms(res.pluginP99[10000]), ms(res.pluginP99[10]), res.pluginP99[10000]/res.pluginP99[10]))
	r.goal("Gateway down or up → DNS, p99 after each per-pod mirror's Endpoints write, 3 and 1,000 pods", "≤ 100 ms", joinComma(gwGoals))
	r.goal("Nearest tier empties → the next tier is answered, p99 from the API write", "≤ 100 ms", foP99)
	r.goal("Writer: change to written slice, p99", "≤ 1 s", ms(res.writerP99))
	r.goal("Writer: API writes per single-endpoint change", "1", fmt.Sprintf("%.2f (the most of any row)", res.maxWrites))
	r.goal("Writer: writes on a restart with nothing changed", "0", fmt.Sprintf("%.0f", restartWrites))
}

// programmingFixtures creates the step's namespace and services: the scenarios', the gateway
// cases' and the failover's (whose linked cluster it returns).
func programmingFixtures(ctx context.Context, c kubernetes.Interface) ([]scenario, string, error) {
	if err := harness.EnsureNamespace(ctx, c, progNS); err != nil {
		return nil, "", err
	}
	scenarios, err := progFixtures(ctx, c)
	if err != nil {
		return nil, "", err
	}
	if err := gatewayFixtures(ctx, c); err != nil {
		return nil, "", err
	}
	west, err := failoverFixtures(ctx, c)
	return scenarios, west, err
}

// programmingConfig is the step's Corefile, on free ports.
func programmingConfig(cp *harness.ControlPlane) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	mport, err := freePort()
	if err != nil {
		return "", err
	}
	return render(programmingCorefile, "PORT", port, "METRICS", "127.0.0.1:"+mport, "KUBECONFIG", cp.Kubeconfig), nil
}

// measureScenarios measures each scenario in turn, once d answers all and their slices are
// written, into the step's two tables.
func measureScenarios(ctx context.Context, c kubernetes.Interface, d *harness.CoreDNS, scenarios []scenario, o options) (progResults, section, section, error) {
	res := progResults{pluginP99: map[int]float64{}}
	dnsSec, wSec := programmingSections(o)
	for _, s := range scenarios {
		if err := waitWritten(ctx, c, s, s.n); err != nil {
			return res, dnsSec, wSec, err
		}
	}
	for _, s := range scenarios {
		changes := o.changes
		if s.name == sliceUpdate {
			changes = o.compareChanges
		}
		m, err := measureScenario(ctx, c, d, s, changes)
		if err != nil {
			return res, dnsSec, wSec, err
		}
		res.add(&dnsSec, &wSec, s, m)
	}
	return res, dnsSec, wSec, nil
}

// programmingSections are the step's two tables, without rows.
func programmingSections(o options) (dnsSec, wSec section) {
	dnsSec = section{
		title: "Programming latency",
		intro: fmt.Sprintf("From the API write that changes one endpoint's readiness until `bin/coredns` answers the change (a per-pod name "+
			"turning NXDOMAIN or back, polled over UDP), %d changes per row (%d in the EndpointSlice update rows, whose plugin shares are compared: "+
			"a p99 of 200 is their second largest); and the plugin's own "+
			"`coredns_global_programming_duration_seconds` (watch event to published index) for the same changes, each change's own "+
			"(the histogram's sum and count read before and after it, so exact, not a bucket's estimate). The mirror row is a remote "+
			"pod turning not ready (or ready) as Linkerd's service mirror writes it, out of (or into) the headless mirror with its per-pod "+
			"mirror, timed from the headless mirror's Endpoints write, and includes kube-controller-manager mirroring it into an "+
			"EndpointSlice; the pod row, the endpointslice controller.", o.changes, o.compareChanges),
		header: []string{"Change", "Endpoints", "p50", "p99", "plugin p50", "plugin p99"},
	}
	wSec = section{
		title: "Writer cost",
		intro: "The same changes, until the written `<svc>-global` EndpointSlice shows them, and the API writes they cost " +
			"(`coredns_global_endpointslice_changes_total`).",
		header: []string{"Change", "Endpoints", "p50", "p99", "API writes per change"},
	}
	return dnsSec, wSec
}

// scenarioRun is what one scenario's changes measured: latencies in seconds, until DNS answered,
// until the writer wrote, and the plugin's own share; and the API writes per change.
type scenarioRun struct {
	dnsLat, writeLat, pluginLat []float64
	perChange                   float64
	writes, changes             int // perChange's terms: a rounded 1.00 can hide a write
}

// progResults are what the goals read of every scenario.
type progResults struct {
	p99s                 []string
	writerP99, maxWrites float64
	pluginP99            map[int]float64 // the EndpointSlice update rows', by endpoints
}

// add adds the rows of scenario s, measured m, to the tables and the results.
func (res *progResults) add(dnsSec, wSec *section, s scenario, m scenarioRun) {
	if s.name == sliceUpdate {
		res.pluginP99[s.n] = quantile(m.pluginLat, .99)
	}
	dnsSec.rows = append(dnsSec.rows, []string{s.name, fmt.Sprint(s.n), ms(quantile(m.dnsLat, .5)), ms(quantile(m.dnsLat, .99)),
		ms(quantile(m.pluginLat, .5)), ms(quantile(m.pluginLat, .99))})
	wSec.rows = append(wSec.rows, []string{s.name, fmt.Sprint(s.n), ms(quantile(m.writeLat, .5)), ms(quantile(m.writeLat, .99)), fmt.Sprintf("%.2f", m.perChange)})
	res.p99s = append(res.p99s, fmt.Sprintf("%s (%s, %d endpoints)", ms(quantile(m.dnsLat, .99)), s.name, s.n))
	res.writerP99 = max(res.writerP99, quantile(m.writeLat, .99))
	res.maxWrites = max(res.maxWrites, m.perChange)
	fmt.Printf("%-40s %5d endpoints: DNS p99 %s, writer p99 %s, %.2f writes/change (%d writes, %d changes)\n",
		s.name, s.n, ms(quantile(m.dnsLat, .99)), ms(quantile(m.writeLat, .99)), m.perChange, m.writes, m.changes)
}

// measureScenario makes changes changes of scenario s, each endpoint going down then up again,
// and times each until d answers it and until the writer wrote it.
func measureScenario(ctx context.Context, c kubernetes.Interface, d *harness.CoreDNS, s scenario, changes int) (scenarioRun, error) {
	var m scenarioRun
	where, err := writtenHosts(ctx, c, s)
	if err != nil {
		return m, err
	}
	before, err := metrics(d.MetricsAddr)
	if err != nil {
		return m, err
	}
	for i := range changes {
		k := (i / 2 * 7) % s.n // each endpoint goes down, then up again
		ready := i%2 == 1
		m0, err := metrics(d.MetricsAddr)
		if err != nil {
			return m, err
		}
		t0 := time.Now()
		written, err := s.flip(ctx, k, ready)
		if err != nil {
			return m, err
		}
		if !written.IsZero() {
			t0 = written
		}
		if err := waitPod(ctx, d.Addr, fmt.Sprintf("%s.%s.%s.%s.global.", s.host(k), s.cluster, s.svc, progNS), ready); err != nil {
			return m, err
		}
		m.dnsLat = append(m.dnsLat, time.Since(t0).Seconds())
		share, err := programmed(d.MetricsAddr, m0)
		if err != nil {
			return m, err
		}
		m.pluginLat = append(m.pluginLat, share)
		if err := waitWrittenReady(ctx, c, where[s.host(k)+"-"+s.cluster], s.host(k)+"-"+s.cluster, ready, s.gone); err != nil {
			return m, fmt.Errorf("change %d: %w\n%s\nthe writer's last log lines:\n%s", i, err, writtenState(ctx, c, s, s.host(k)+"-"+s.cluster), d.Tail(100))
		}
		m.writeLat = append(m.writeLat, time.Since(t0).Seconds())
	}
	after, err := metrics(d.MetricsAddr)
	if err != nil {
		return m, err
	}
	writes := 0.0
	for _, op := range []string{"create", "update", "delete"} {
		k := `coredns_global_endpointslice_changes_total{operation="` + op + `"}`
		writes += after[k] - before[k]
	}
	m.perChange = writes / float64(changes)
	m.writes, m.changes = int(writes), changes
	return m, nil
}

// restartWrites stops d and starts its Corefile again in dir, with nothing changed, and returns
// the writes the new process made once it led and synced the services (at least synced of them)
// and the written objects it changed. The rows before end on a DNS answer, which comes before the
// writer's write: it first waits until the written objects hold still, so a write the old process
// had not made yet is not counted against the new one.
func restartWrites(ctx context.Context, c kubernetes.Interface, d *harness.CoreDNS, corefile, dir string, synced int) (float64, []string, error) {
	before, err := settledVersions(ctx, c)
	if err != nil {
		d.Stop()
		return 0, nil, err
	}
	d.Stop()
	t0 := time.Now()
	d2, err := harness.StartCoreDNSProcess(corefile, dir, nil)
	if err != nil {
		return 0, nil, err
	}
	defer d2.Stop()
	var m map[string]float64
	for {
		if m, err = metrics(d2.MetricsAddr); err == nil && m["coredns_global_leader"] == 1 &&
			m[`coredns_global_writer_syncs_total{result="success"}`] >= float64(synced) {
			break
		}
		if time.Since(t0) > 2*time.Minute {
			return 0, nil, fmt.Errorf("the restarted writer never synced: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	m, _ = metrics(d2.MetricsAddr)
	writes := m[`coredns_global_endpointslice_changes_total{operation="create"}`] + m[`coredns_global_endpointslice_changes_total{operation="update"}`] +
		m[`coredns_global_endpointslice_changes_total{operation="delete"}`]
	after, err := writtenVersions(ctx, c)
	if err != nil {
		return 0, nil, err
	}
	var rewritten []string
	for name, v := range after {
		if before[name] != v {
			rewritten = append(rewritten, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			rewritten = append(rewritten, name+" (deleted)")
		}
	}
	slices.Sort(rewritten)
	return writes, rewritten, nil
}

func joinComma(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}

const sliceUpdate = "EndpointSlice update"
