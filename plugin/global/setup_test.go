package global

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/plugin/global/writer"

	"github.com/coredns/caddy"
)

func TestParse(t *testing.T) {
	cfg, err := parse(caddy.NewTestController("dns", `global`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.zones, []string{"global."}) || cfg.ttl != 5 || cfg.startupTimeout != 5*time.Second ||
		cfg.topology.Local != "local" || !slices.Equal(cfg.topology.Keys, index.DefaultKeys) ||
		cfg.exportSelector != watch.DefaultExportSelector || cfg.kubeconfig != "" || len(cfg.namespaces) != 0 {
		t.Errorf("defaults: %+v", cfg)
	}
	if !cfg.write || cfg.writer.Suffix != "-global" || cfg.writer.MaxEndpoints != 100 || cfg.apiQPS != 50 || cfg.apiBurst != 100 ||
		cfg.election != (writer.Election{Namespace: writer.DefaultLeaseNamespace(), Name: "coredns-global-writer", Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}) {
		t.Errorf("writer defaults: write %v %+v %+v qps %v burst %v", cfg.write, cfg.writer, cfg.election, cfg.apiQPS, cfg.apiBurst)
	}
	cfg, err = parse(caddy.NewTestController("dns", `global {
		endpointslices
		endpointslice_size 1000
		service_suffix -all
		lease kube-system global-writer
		lease_duration 30s
		lease_renew_deadline 20s
		lease_retry_period 4s
		apiserver_qps 20.5
		apiserver_burst 40
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.write || cfg.writer.Suffix != "-all" || cfg.writer.MaxEndpoints != 1000 || cfg.apiQPS != 20.5 || cfg.apiBurst != 40 ||
		cfg.election != (writer.Election{Namespace: "kube-system", Name: "global-writer", Duration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 4 * time.Second}) {
		t.Errorf("writer options: %+v %+v", cfg.writer, cfg.election)
	}
	if cfg, err = parse(caddy.NewTestController("dns", "global {\n endpointslices off\n}")); err != nil || cfg.write {
		t.Errorf("endpointslices off: write %v, %v", cfg.write, err)
	}
	if cfg, err = parse(caddy.NewTestController("dns", "global {\n serviceimports\n}")); err != nil || !cfg.writer.ServiceImports {
		t.Errorf("serviceimports: %v, %v", cfg.writer.ServiceImports, err)
	}
	if cfg, err = parse(caddy.NewTestController("dns", "global")); err != nil || !cfg.g.rotate || !cfg.g.explain || cfg.writer.ServiceImports {
		t.Errorf("defaults: rotate %v explain %v, %v", cfg.g.rotate, cfg.g.explain, err)
	}
	if cfg, err = parse(caddy.NewTestController("dns", "global {\n rotate off\n explain off\n}")); err != nil || cfg.g.rotate || cfg.g.explain {
		t.Errorf("rotate off, explain off: %v %v, %v", cfg.g.rotate, cfg.g.explain, err)
	}

	cfg, err = parse(caddy.NewTestController("dns", `global global. mesh.example {
		kubeconfig /etc/kube.conf east-ctx
		namespaces db app
		cluster east
		locality east zone=us-east-1a region=us-east-1
		locality west region=us-east-1 example.com/rack=r7
		topology example.com/rack zone region
		ttl 30
		fallthrough mesh.example
		startup_timeout 10s
		prefer_namespaces db
		export_selector mirror.linkerd.io/exported in (true, remote-discovery)
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"east": {index.ZoneKey: "us-east-1a", index.RegionKey: "us-east-1"},
		"west": {index.RegionKey: "us-east-1", "example.com/rack": "r7"},
	}
	switch {
	case !slices.Equal(cfg.zones, []string{"global.", "mesh.example."}):
		t.Errorf("zones %v", cfg.zones)
	case cfg.kubeconfig != "/etc/kube.conf" || cfg.context != "east-ctx":
		t.Errorf("kubeconfig %q %q", cfg.kubeconfig, cfg.context)
	case !slices.Equal(cfg.namespaces, []string{"db", "app"}) || !slices.Equal(cfg.preferNamespaces, []string{"db"}):
		t.Errorf("namespaces %v prefer %v", cfg.namespaces, cfg.preferNamespaces)
	case cfg.topology.Local != "east" || !slices.Equal(cfg.topology.Keys, []string{"example.com/rack", index.ZoneKey, index.RegionKey}):
		t.Errorf("topology %+v", cfg.topology)
	case len(cfg.topology.Locality) != 2 || !equalMaps(cfg.topology.Locality["east"], want["east"]) || !equalMaps(cfg.topology.Locality["west"], want["west"]):
		t.Errorf("locality %v", cfg.topology.Locality)
	case cfg.ttl != 30 || cfg.startupTimeout != 10*time.Second:
		t.Errorf("ttl %d startup %v", cfg.ttl, cfg.startupTimeout)
	case !cfg.g.Fall.Through("x.mesh.example.") || cfg.g.Fall.Through("x.global."):
		t.Errorf("fallthrough %v", cfg.g.Fall)
	case cfg.exportSelector != "mirror.linkerd.io/exported in (true, remote-discovery)":
		t.Errorf("export selector %q", cfg.exportSelector)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ corefile, want string }{
		{"global {\n bogus\n}", `unknown property "bogus"`},
		{"global {\n ttl 3601\n}", "ttl must be an integer in [0, 3600]"},
		{"global {\n ttl -1\n}", "ttl must be an integer in [0, 3600]"},
		{"global {\n ttl five\n}", "ttl must be an integer in [0, 3600]"},
		{"global {\n ttl\n}", "Wrong argument count"},
		{"global {\n ttl 5\n ttl 6\n}", "ttl given twice"},
		{"global {\n locality west zone=a\n locality west zone=b\n}", `locality for cluster "west" given twice`},
		{"global {\n locality west zone\n}", `"zone" is not KEY=VALUE`},
		{"global {\n locality west zone=a zone=b\n}", "topology.kubernetes.io/zone given twice"},
		{"global {\n locality West zone=a\n}", `locality cluster "West" is not a DNS label`},
		{"global {\n locality west bad/key/x=a\n}", `"bad/key/x" is not a label key`},
		{"global {\n locality west zone=not@value\n}", `value "not@value"`},
		{"global {\n locality west\n}", "Wrong argument count"},
		{"global {\n topology zone zone\n}", "topology lists topology.kubernetes.io/zone twice"},
		{"global {\n topology\n}", "topology takes 1 to 16 keys"},
		{"global {\n cluster east.us\n}", `cluster name "east.us" is not a DNS label`},
		{"global {\n cluster\n}", "Wrong argument count"},
		{"global {\n namespaces Db\n}", `namespaces entry "Db" is not a DNS label`},
		{"global {\n namespaces db db\n}", `namespaces lists "db" twice`},
		{"global {\n prefer_namespaces\n}", "Wrong argument count"},
		{"global {\n startup_timeout soon\n}", `startup_timeout must be a duration >= 0, not "soon"`},
		{"global {\n kubeconfig a b c\n}", "Wrong argument count"},
		{"global {\n export_selector a=(\n}", "export_selector"},
		{"global under_score.example", `zone "under_score.example." is not a domain name`},
		{"global .", `zone "." is not a domain name`},
		{"global \"" + strings.Repeat("0", 64) + "\"", "is not a domain name"}, // found by FuzzParse
		{"global\nglobal", "this plugin can only be used once per Server Block"},
		{"global {\n endpointslices maybe\n}", `endpointslices takes on or off, not "maybe"`},
		{"global {\n rotate sometimes\n}", `rotate takes on or off, not "sometimes"`},
		{"global {\n names kubernetes\n}", `names takes global or mcs [ZONES...], not "kubernetes"`},
		{"global {\n names mcs clusterset.local\n}", `names mcs: "clusterset.local." is not one of the plugin's zones [global.]`},
		{"global {\n explain on off\n}", `explain takes on or off, not "on off"`},
		{"global {\n endpointslice_size 0\n}", "endpointslice_size must be an integer in [1, 1000]"},
		{"global {\n endpointslice_size 1001\n}", "endpointslice_size must be an integer in [1, 1000]"},
		{"global {\n service_suffix _x\n}", `service_suffix "_x" cannot end a Service name`},
		{"global {\n serviceimports on\n endpointslices off\n}", "serviceimports on needs the writer"},
		{"global {\n serviceimports on\n service_suffix -mcs\n}", "service_suffix -mcs would name"},
		{"global {\n serviceimports yes\n}", `serviceimports takes on or off, not "yes"`},
		{"global {\n lease onlyone\n}", "Wrong argument count"},
		{"global {\n lease Bad name\n}", `lease namespace "Bad" is not a DNS label`},
		{"global {\n lease ns Bad_name\n}", `lease name "Bad_name"`},
		{"global {\n lease_duration -1s\n}", "lease_duration must be a positive duration"},
		{"global {\n lease_duration 10s\n}", "lease timings must satisfy lease_duration > lease_renew_deadline"},
		{"global {\n lease_retry_period 9s\n}", "lease timings must satisfy"},
		{"global {\n apiserver_qps 0\n}", "apiserver_qps must be a number > 0"},
		{"global {\n apiserver_burst x\n}", "apiserver_burst must be an integer >= 1"},
	} {
		_, err := parse(caddy.NewTestController("dns", tc.corefile))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.corefile, err, tc.want)
		}
	}
}

func TestSetupErrorsNameThePlugin(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.kubeconfig")
	garbage := filepath.Join(t.TempDir(), "garbage.kubeconfig")
	if err := os.WriteFile(garbage, []byte("this: [is not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod, whatever runs the tests
	t.Setenv("KUBECONFIG", "")
	for _, tc := range []struct{ corefile, want string }{
		{"global {\n kubeconfig " + missing + "\n}", "plugin/global: Testfile:2 - kubeconfig " + missing},
		{"global {\n kubeconfig " + garbage + "\n}", "plugin/global: Testfile:2 - kubeconfig " + garbage},
		{"global", "plugin/global: no kubeconfig given, KUBECONFIG unset, and not running in a Kubernetes pod"},
		{"global {\n ttl 99999\n}", "plugin/global: "},
	} {
		err := setup(caddy.NewTestController("dns", tc.corefile))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one starting %q", tc.corefile, err, tc.want)
		}
	}
}

func TestSetupWithKubeconfig(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c := caddy.NewTestController("dns", "global {\n kubeconfig "+kc+"\n}")
	if err := setup(c); err != nil {
		t.Fatalf("setup: %v", err)
	}
	if err := setup(caddy.NewTestController("dns", "global {\n kubeconfig "+kc+" nosuchcontext\n}")); err == nil ||
		!strings.Contains(err.Error(), "nosuchcontext") {
		t.Errorf("unknown context: %v", err)
	}
	// Outside a pod and without the option, $KUBECONFIG.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", kc)
	if err := setup(caddy.NewTestController("dns", "global")); err != nil {
		t.Errorf("setup with $KUBECONFIG: %v", err)
	}
}
