package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ruleFile is the part of a Prometheus rule file the test reads.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// metricName finds the metric names of this process (not Linkerd's gateway_alive, not up) in PromQL
// and in prose.
var metricName = regexp.MustCompile(`\b(?:coredns|process|go)_[a-z0-9_]*[a-z0-9]\b`)

// TestMonitoring: deploy/monitoring's alerting rules pass promtool's checks and their unit tests,
// every alert says how bad it is and what to do, the dashboard parses and uses its datasource
// variable, and every metric the rules and the dashboard name is one bin/coredns exports.
func TestMonitoring(t *testing.T) {
	t.Parallel()
	root := repoPath(t)
	dir := filepath.Join(root, "deploy", "monitoring")

	promtool, err := harness.Built(harness.EnvPromtoolBin, "promtool")
	testkit.Must(t, err)
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var rules ruleFile
	testkit.Must(t, yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(dir, "rules.yaml"))), &rules))
	names := map[string][]string{} // metric name -> where it is named
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			for _, text := range append([]string{r.Expr}, r.Annotations["description"], r.Annotations["runbook"]) {
				for _, n := range metricName.FindAllString(text, -1) {
					names[n] = append(names[n], "rule "+r.Alert)
				}
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alert in rules.yaml")
	}

	var dash map[string]any
	testkit.Must(t, json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "dashboard.json"))), &dash))
	for _, e := range dashboardExprs(t, dash) {
		for _, n := range metricName.FindAllString(e.expr, -1) {
			names[n] = append(names[n], "panel "+e.where)
		}
	}
	var vars []string
	for _, v := range list(dash["templating"].(map[string]any)["list"]) {
		vars = append(vars, v.(map[string]any)["name"].(string))
	}
	for _, v := range []string{"datasource", "job", "instance"} {
		if !slices.Contains(vars, v) {
			t.Errorf("dashboard variables %v: no %s", vars, v)
		}
	}

	exported := exportedMetrics(t)
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if !exports(exported, n) {
			t.Errorf("%s is not exported by bin/coredns (named in %s)", n, strings.Join(slices.Compact(names[n]), ", "))
		}
	}
}

// exports reports whether a scrape with families (name -> type) has the series n: a family's
// own name, or a histogram's _bucket, _sum or _count.
func exports(families map[string]string, n string) bool {
	if _, ok := families[n]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(n, suffix); ok && families[base] == "histogram" {
			return true
		}
	}
	return false
}

type dashboardExpr struct{ where, expr string }

// dashboardExprs returns every query of the dashboard: its panels' targets (rows' nested panels
// too) and its query variables. Every panel and target reads ${datasource}.
func dashboardExprs(t *testing.T, dash map[string]any) []dashboardExpr {
	t.Helper()
	var out []dashboardExpr
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			p := p.(map[string]any)
			title, _ := p["title"].(string)
			walk(list(p["panels"]))
			if p["type"] == "row" {
				continue
			}
			targets := list(p["targets"])
			if len(targets) == 0 {
				t.Errorf("dashboard panel %q has no query", title)
			}
			datasources := []any{p["datasource"]}
			for _, tg := range targets {
				datasources = append(datasources, tg.(map[string]any)["datasource"])
			}
			for _, ds := range datasources {
				if m, _ := ds.(map[string]any); m == nil || m["uid"] != "${datasource}" {
					t.Errorf("dashboard panel %q: datasource %v, want uid ${datasource}", title, ds)
				}
			}
			for _, tg := range targets {
				expr, _ := tg.(map[string]any)["expr"].(string)
				if expr == "" {
					t.Errorf("dashboard panel %q: a target without expr", title)
				}
				out = append(out, dashboardExpr{title, expr})
			}
		}
	}
	walk(list(dash["panels"]))
	for _, v := range list(dash["templating"].(map[string]any)["list"]) {
		v := v.(map[string]any)
		if v["type"] != "query" {
			continue
		}
		q, _ := v["query"].(string)
		if m, ok := v["query"].(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		out = append(out, dashboardExpr{"variable " + v["name"].(string), q})
	}
	return out
}

func list(v any) []any { l, _ := v.([]any); return l }

// exportedMetrics runs bin/coredns with the writer on, over a state that gives every labelled
// vector a child (a local StatefulSet, a linked cluster whose gateway is down, a malformed mirror,
// written objects, queries of each type), and returns its metric families, name -> type.
func exportedMetrics(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	west := mirror(ns, "west", true)
	west.GatewayDown = true
	_, err := harness.CreateMirror(ctx, client(), west)
	testkit.Must(t, err)
	// A headless "mirror" without a cluster label: skipped_total and objects_with_problems.
	_, err = client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "broken-x", Labels: map[string]string{harness.LabelMirroredService: "true"}},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 1}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))

	fooNS := "foo." + ns + ".global."
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10", "A 10.244.2.11")
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{fooNS, dns.TypeA}, {fooNS, dns.TypeAAAA}, {"_db._tcp." + fooNS, dns.TypeSRV}, {fooNS, dns.TypeANY}, {"nope." + ns + ".global.", dns.TypeA}} {
		ask(t, c, "udp", q.name, q.qtype)
	}
	harness.Eventually(t, "the writer's and the linked cluster's metrics", func() error {
		leader, down := c.Metric(t, "coredns_global_leader"), c.Metric(t, `coredns_global_cluster_down{cluster="west"}`)
		creates := counter(t, c, `coredns_global_endpointslice_changes_total{operation="create"}`)
		if leader != "1" || down != "1" || counter(t, c, syncedOK) < 1 || creates < 1 {
			return fmt.Errorf("leader %q, west down %q, syncs %v, creates %v", leader, down, counter(t, c, syncedOK), creates)
		}
		// What the alerts read of a healthy replica at rest.
		synced, unpublished := c.Metric(t, "coredns_global_synced"), c.Metric(t, "coredns_global_unpublished_change_timestamp_seconds")
		if synced != "1" || unpublished != "0" {
			return fmt.Errorf("synced %q, unpublished change at %q", synced, unpublished)
		}
		return nil
	})

	families := map[string]string{}
	for _, l := range strings.Split(harness.Get(t, "http://"+c.MetricsAddr+"/metrics"), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			families[f[2]] = f[3]
		}
	}
	return families
}
