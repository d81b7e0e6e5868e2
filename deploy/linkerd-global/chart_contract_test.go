package main

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/stanza"
	"github.com/globaldns/global/test/testkit"

	"sigs.k8s.io/yaml"
)

// renderedCorefile is the Corefile the chart renders with values (Helm's --set), "" and the
// error when it renders none.
func renderedCorefile(t *testing.T, values ...string) (string, error) {
	t.Helper()
	ms, err := render(valueOptions{values: append([]string{"image.repository=example.com/coredns-global"}, values...)}, "coredns-global")
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.kind == "ConfigMap" && strings.Contains(m.text, "Corefile") {
			var cm struct{ Data map[string]string }
			testkit.Must(t, yaml.Unmarshal([]byte(m.text), &cm))
			return cm.Data["Corefile"], nil
		}
	}
	t.Fatal("the chart renders no ConfigMap with a Corefile")
	return "", nil
}

// TestChartKeepsTheContract: the chart's templates type what Helm cannot import from the
// contract — the defaults they render an option against (only a value that differs is rendered,
// so that the default Corefile is deploy/base's and the release before reads it too), the rules
// across options, and the labels of the objects the writer writes, in its admission policies —
// and are held to it here: a default of the contract changed, or a template's typed copy, fails.
func TestChartKeepsTheContract(t *testing.T) {
	base, err := renderedCorefile(t)
	testkit.Must(t, err)
	s, err := stanza.Parse("Corefile", base)
	testkit.Must(t, err)
	d := contract.Defaults()
	if !slices.Equal(s.Zones, []string{stanza.DefaultZone}) || s.LeaseName != d.LeaseName || s.LeaseNamespace != "" ||
		s.LinksNamespace != d.LinksNamespace || !slices.Equal(s.Forwarders, d.Forwarders) || !s.Writer {
		t.Errorf("the default values render %+v, not the contract's defaults", s)
	}
	if strings.Contains(base, "        lease ") {
		t.Errorf("the default release renders a lease line: its Lease is not the contract's default %s\n%s", d.LeaseName, base)
	}
	// Each value at the plugin's default renders the default Corefile, without its option (absent):
	// the template compares it with the same default. Another value renders its option.
	for _, tc := range []struct{ value, def, absent, other, option string }{
		{"zones", "{" + strings.TrimSuffix(stanza.DefaultZone, ".") + "}", "global global", "{mesh.example}", "global mesh.example {"},
		{"linkerd.multiclusterNamespace", d.LinksNamespace, "links_namespace", "links", "links_namespace links"},
		{"writer.serviceSuffix", contract.DefaultSuffix, "service_suffix", "-all", "service_suffix -all"},
		{"policy.default", contract.DefaultPolicy, "policy", "nearest", "policy nearest"},
		{"explain.from", "{" + strings.Join(contract.DefaultExplainFrom(), ",") + "}", "explain_from", "{10.0.0.0/8}", "explain_from 10.0.0.0/8"},
		{"clientLocality.forwarders", "null", "client_forwarders", "{dns/cache}", "client_forwarders dns/cache"},
	} {
		got, err := renderedCorefile(t, tc.value+"="+tc.def, "clientLocality.sources={node}")
		testkit.Must(t, err)
		want, err := renderedCorefile(t, "clientLocality.sources={node}")
		testkit.Must(t, err)
		if got != want || strings.Contains(got, tc.absent) {
			t.Errorf("%s=%s (the plugin's default) renders\n%s\nnot, without %s,\n%s", tc.value, tc.def, got, tc.absent, want)
		}
		other, err := renderedCorefile(t, tc.value+"="+tc.other, "clientLocality.sources={node}")
		testkit.Must(t, err)
		if !strings.Contains(other, tc.option) {
			t.Errorf("%s=%s renders no %q:\n%s", tc.value, tc.other, tc.option, other)
		}
		if _, err := stanza.Parse("Corefile", other); err != nil {
			t.Errorf("%s=%s: %v", tc.value, tc.other, err)
		}
	}
	// The rules across options: values the contract refuses are refused by the chart, with its
	// reason.
	for _, values := range [][]string{{"clientLocality.sources={ecs}"}, {"clientLocality.sources={node}", "clientLocality.ecsFrom={10.0.0.0/8}"}} {
		if _, err := renderedCorefile(t, values...); err == nil || !strings.Contains(err.Error(), "go together") {
			t.Errorf("%q renders: %v", values, err)
		}
	}
	// The labels and values the admission policies match are the writer's.
	ms, err := render(valueOptions{values: []string{"image.repository=example.com/coredns-global", "writer.serviceImports=true"}}, "coredns-global")
	testkit.Must(t, err)
	labels := []string{contract.LabelWriter, contract.LabelService, contract.LabelCluster}
	equal := regexp.MustCompile(`\[\?'([^']+)'\]\.orValue\(''\) == '([^']+)'|source\.component == '([^']+)'`)
	var matched int
	for _, m := range ms {
		if !strings.HasPrefix(m.kind, "ValidatingAdmissionPolicy") {
			continue
		}
		for _, l := range regexp.MustCompile(contract.Domain+`/[a-z-]+`).FindAllString(m.text, -1) {
			if !slices.Contains(labels, l) && l != contract.Domain+"/" {
				t.Errorf("%s %s matches label %s, which the writer does not write (%v)", m.kind, m.name, l, labels)
			}
		}
		for _, e := range equal.FindAllStringSubmatch(m.text, -1) {
			want := map[string]string{contract.LabelManagedBy: contract.ManagedBy, "endpointslice.kubernetes.io/managed-by": contract.SlicesManagedBy, "": contract.ManagedBy}[e[1]]
			if got := e[2] + e[3]; want != "" && got != want {
				t.Errorf("%s %s: %s is %q, the writer's %q", m.kind, m.name, cmp.Or(e[1], "source.component"), got, want)
			}
			matched++
		}
	}
	if matched < 5 { // the writer's policy: managed-by, the Events' source, the slices' managed-by; the two of its slices'
		t.Errorf("found %d label values in the admission policies", matched)
	}
}
