package global

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/plugin/global/writer"

	"github.com/coredns/caddy"
)

func TestParse(t *testing.T) {
	g, err := parseGlobal(caddy.NewTestController("dns", `global`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Zones, []string{"global."}) || g.TTL != 5 || g.startupTimeout != 5*time.Second ||
		g.corefile.Local != "local" || !slices.Equal(g.Topology, index.DefaultKeys) ||
		g.exportSelector != watch.DefaultExportSelector || g.kubeconfig != "" || len(g.Namespaces) != 0 {
		t.Errorf("defaults: %+v", g)
	}
	if !g.Writer || g.writerConfig.Suffix != "-global" || g.writerConfig.MaxEndpoints != 100 || g.apiQPS != 50 || g.apiBurst != 100 ||
		g.lease() != (writer.Election{Namespace: writer.DefaultLeaseNamespace(), Name: "coredns-global-writer", Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}) {
		t.Errorf("writer defaults: write %v %+v %+v qps %v burst %v", g.Writer, g.writerConfig, g.lease(), g.apiQPS, g.apiBurst)
	}
	g, err = parseGlobal(caddy.NewTestController("dns", `global {
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
	if !g.Writer || g.writerConfig.Suffix != "-all" || g.writerConfig.MaxEndpoints != 1000 || g.apiQPS != 20.5 || g.apiBurst != 40 ||
		g.lease() != (writer.Election{Namespace: "kube-system", Name: "global-writer", Duration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 4 * time.Second}) {
		t.Errorf("writer options: %+v %+v", g.writerConfig, g.lease())
	}
	if g, err = parseGlobal(caddy.NewTestController("dns", "global {\n endpointslices off\n}")); err != nil || g.Writer {
		t.Errorf("endpointslices off: write %v, %v", g.Writer, err)
	}
	if g, err = parseGlobal(caddy.NewTestController("dns", "global {\n serviceimports\n}")); err != nil || !g.ServiceImports {
		t.Errorf("serviceimports: %v, %v", g.ServiceImports, err)
	}
	// Answers ranked from clients: off by default; the client keys follow `topology` when given.
	if g, err = parseGlobal(caddy.NewTestController("dns", "global")); err != nil || g.ClientLocality != (contract.Sources{}) ||
		!slices.Equal(g.ClientTopology, index.DefaultClientKeys) {
		t.Errorf("client defaults: %+v %v, %v", g.ClientLocality, g.ClientTopology, err)
	}
	g, err = parseGlobal(caddy.NewTestController("dns", "global {\n client_locality pod ecs\n client_ecs_from dns/dnsdist\n client_forwarders kube-system/coredns dns/dnsdist\n topology hostname zone cluster\n}"))
	if err != nil || g.ClientLocality != (contract.Sources{ECS: true, Pod: true}) || !slices.Equal(g.Forwarders, []string{"kube-system/coredns", "dns/dnsdist"}) ||
		!slices.Equal(g.Topology, []string{index.ZoneKey}) || !slices.Equal(g.ClientTopology, []string{index.HostnameKey, index.ZoneKey, index.ClusterKey}) {
		t.Errorf("client options: %+v %v %v %v, %v", g.ClientLocality, g.Forwarders, g.Topology, g.ClientTopology, err)
	}
	if g, err = parseGlobal(caddy.NewTestController("dns", "global {\n owner clusterroles.rbac.authorization.k8s.io system:coredns-global\n}")); err != nil ||
		g.Owner != [2]string{"clusterroles.rbac.authorization.k8s.io", "system:coredns-global"} {
		t.Errorf("owner: %+v, %v", g.Owner, err)
	}
	g, err = parseGlobal(caddy.NewTestController("dns", "global {\n client_locality ecs\n client_ecs_from 10.0.0.0/8 kube-system/kube-dns fd00::1\n explain_from 127.0.0.1 ::1/128\n}"))
	if err != nil || fmt.Sprint(g.ECSNetworks) != "[10.0.0.0/8 fd00::1/128]" || !slices.Equal(g.ECSServices, []string{"kube-system/kube-dns"}) ||
		fmt.Sprint(g.ExplainFrom) != "[127.0.0.1/32 ::1/128]" {
		t.Errorf("client_ecs_from, explain_from: %v %v %v, %v", g.ECSNetworks, g.ECSServices, g.ExplainFrom, err)
	}
	if g, err = parseGlobal(caddy.NewTestController("dns", "global")); err != nil || !g.Rotate || !g.Explain || g.ServiceImports || g.Owner[0] != "" ||
		g.ECSNetworks != nil || g.ECSServices != nil || fmt.Sprint(g.ExplainFrom) != "[127.0.0.0/8 ::1/128]" || g.LinksNamespace != "linkerd-multicluster" {
		t.Errorf("defaults: rotate %v explain %v explain_from %v, %v", g.Rotate, g.Explain, g.ExplainFrom, err)
	}
	if g, err = parseGlobal(caddy.NewTestController("dns", "global {\n rotate off\n explain off\n}")); err != nil || g.Rotate || g.Explain {
		t.Errorf("rotate off, explain off: %v %v, %v", g.Rotate, g.Explain, err)
	}

	g, err = parseGlobal(caddy.NewTestController("dns", `global global. mesh.example {
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
	case !slices.Equal(g.Zones, []string{"global.", "mesh.example."}):
		t.Errorf("zones %v", g.Zones)
	case g.kubeconfig != "/etc/kube.conf" || g.kubeContext != "east-ctx":
		t.Errorf("kubeconfig %q %q", g.kubeconfig, g.kubeContext)
	case !slices.Equal(g.Namespaces, []string{"db", "app"}) || !slices.Equal(g.PreferNamespaces, []string{"db"}):
		t.Errorf("namespaces %v prefer %v", g.Namespaces, g.PreferNamespaces)
	case g.corefile.Local != "east" || !slices.Equal(g.Topology, []string{"example.com/rack", index.ZoneKey, index.RegionKey}):
		t.Errorf("topology %+v %v", g.corefile, g.Topology)
	case len(g.Localities) != 2 || !equalMaps(g.Localities["east"], want["east"]) || !equalMaps(g.Localities["west"], want["west"]):
		t.Errorf("locality %v", g.Localities)
	case g.TTL != 30 || g.startupTimeout != 10*time.Second:
		t.Errorf("ttl %d startup %v", g.TTL, g.startupTimeout)
	case !g.Fall.Through("x.mesh.example.") || g.Fall.Through("x.global."):
		t.Errorf("fallthrough %v", g.Fall)
	case g.exportSelector != "mirror.linkerd.io/exported in (true, remote-discovery)":
		t.Errorf("export selector %q", g.exportSelector)
	}
}

// TestZones: without zone arguments the plugin serves its server block's zones, as CoreDNS's
// plugins do, and global. where the block is the root; with them, the arguments.
func TestZones(t *testing.T) {
	for _, tc := range []struct {
		keys      []string // the server block's, as CoreDNS gives them to the plugin
		corefile  string
		zones     []string
		mcs       []string
		policyFor string // a zone whose policy the stanza sets
	}{
		{nil, "global", []string{"global."}, nil, ""}, // a test's controller: no server block
		{[]string{"dns://global.:5353"}, "global", []string{"global."}, nil, ""},
		{[]string{"dns://.:53"}, "global", []string{"global."}, nil, ""},
		{[]string{"dns://clusterset.local.:53"}, "global {\n names mcs\n}", []string{"clusterset.local."}, []string{"clusterset.local."}, ""},
		{[]string{"dns://a.example.:53", "dns://b.example.:53"}, "global", []string{"a.example.", "b.example."}, nil, ""},
		{[]string{"dns://a.example.:53", "dns://b.example.:53"}, "global {\n names mcs b.example\n policy nearest a.example\n}",
			[]string{"a.example.", "b.example."}, []string{"b.example."}, "a.example."},
		{[]string{"dns://.:53", "dns://mesh.example.:53"}, "global", []string{"global.", "mesh.example."}, nil, ""},
		{[]string{"dns://global.:53", "tls://global.:853"}, "global", []string{"global."}, nil, ""},
		{[]string{"dns://Mesh.Example.:53"}, "global", []string{"mesh.example."}, nil, ""},
		// Arguments win, as before.
		{[]string{"dns://.:53"}, "global mesh.example", []string{"mesh.example."}, nil, ""},
		{[]string{"dns://a.example.:53"}, "global global", []string{"global."}, nil, ""},
		{[]string{"dns://clusterset.local.:53", "dns://global.:53"}, "global clusterset.local global {\n names mcs clusterset.local\n}",
			[]string{"clusterset.local.", "global."}, []string{"clusterset.local."}, ""},
	} {
		c := caddy.NewTestController("dns", tc.corefile)
		c.ServerBlockKeys = tc.keys
		g, err := parseGlobal(c)
		if err != nil {
			t.Errorf("%v %q: %v", tc.keys, tc.corefile, err)
			continue
		}
		if !slices.Equal(g.Zones, tc.zones) || !slices.Equal(g.MCSZones, tc.mcs) {
			t.Errorf("%v %q: zones %v mcs %v, want %v %v", tc.keys, tc.corefile, g.Zones, g.MCSZones, tc.zones, tc.mcs)
		}
		if _, ok := g.Policies.Get(tc.policyFor); tc.policyFor != "" && !ok {
			t.Errorf("%v %q: no policy for %s: %v", tc.keys, tc.corefile, tc.policyFor, g.Policies)
		}
	}
	for _, tc := range []struct {
		keys           []string
		corefile, want string
	}{
		{[]string{"dns://_srv.example.:53"}, "global", `server block zone "_srv.example." is not a domain name made of DNS labels`},
		{[]string{"dns://a.example.:53"}, "global {\n names mcs clusterset.local\n}", `names mcs: "clusterset.local." is not one of the plugin's zones [a.example.]`},
		{[]string{"dns://a.example.:53"}, "global {\n policy all global\n}", `policy: "global." is not one of the plugin's zones [a.example.]`},
	} {
		c := caddy.NewTestController("dns", tc.corefile)
		c.ServerBlockKeys = tc.keys
		if _, err := parseGlobal(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: error %v, want one containing %q", tc.keys, tc.corefile, err, tc.want)
		}
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
		{"global {\n owner clusterroles.rbac.authorization.k8s.io\n}", "Wrong argument count"},
		{"global {\n owner roles.rbac.authorization.k8s.io coredns-global-write\n}", `owner: "roles.rbac.authorization.k8s.io" is not one of the cluster-scoped resources clusterrolebindings.rbac.authorization.k8s.io, clusterroles`},
		{"global {\n owner clusterrole coredns-global-write\n}", `owner: "clusterrole" is not one of`},
		{"global {\n owner namespaces a/b\n}", `owner name "a/b": may not contain '/'`},
		{"global {\n owner namespaces coredns-global\n endpointslices off\n}", "owner needs the writer"},
		{"global {\n lease onlyone\n}", "Wrong argument count"},
		{"global {\n lease Bad name\n}", `lease namespace "Bad" is not a DNS label`},
		{"global {\n lease ns Bad_name\n}", `lease name "Bad_name"`},
		{"global {\n lease_duration -1s\n}", "lease_duration must be a positive duration"},
		{"global {\n lease_duration 10s\n}", "lease timings must satisfy lease_duration > lease_renew_deadline"},
		{"global {\n lease_retry_period 9s\n}", "lease timings must satisfy"},
		{"global {\n apiserver_qps 0\n}", "apiserver_qps must be a number > 0"},
		{"global {\n apiserver_burst x\n}", "apiserver_burst must be an integer >= 1"},
		{"global {\n client_locality\n}", "Wrong argument count"},
		{"global {\n client_locality ecs gps\n}", `client_locality takes ecs, node or pod, not "gps"`},
		{"global {\n client_locality node node\n}", "client_locality lists node twice"},
		{"global {\n client_forwarders kube-system/kube-dns\n}", "client_forwarders needs client_locality"},
		{"global {\n client_locality ecs\n client_forwarders kube-dns\n}", `client_forwarders: "kube-dns" is not a Service's <namespace>/<name>`},
		{"global {\n client_locality node\n client_ecs_from 10.0.0.0/8\n}", "client_locality ecs and client_ecs_from go together"},
		{"global {\n client_locality ecs node\n}", "client_locality ecs and client_ecs_from go together"},
		{"global {\n client_locality ecs\n client_ecs_from kube-system/kube_dns\n}", `client_ecs_from: "kube-system/kube_dns" is not a Service's`},
		{"global {\n client_locality ecs\n client_ecs_from\n}", "Wrong argument count"},
		{"global {\n links_namespace Linkerd\n}", `links_namespace "Linkerd" is not a DNS label`},
		{"global {\n links_namespace a b\n}", "Wrong argument count"},
		{"global {\n explain_from 10.0.0.1/8\n}", `explain_from: "10.0.0.1/8" has bits set past its length: 10.0.0.0/8`},
		{"global {\n explain_from kube-system\n}", `explain_from: "kube-system" is not a network`},
		{"global {\n explain_from 10.0.0.0/8 10.0.0.0/8\n}", `explain_from lists "10.0.0.0/8" twice`},
		{"global {\n topology hostname zone hostname\n}", "topology lists kubernetes.io/hostname twice"},
	} {
		_, err := parseGlobal(caddy.NewTestController("dns", tc.corefile))
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

// A SIGTERM during OnStartup's wait runs OnShutdown before the writer's campaign exists (caddy
// runs the shutdown callbacks from its signal handler): it must stop what exists, not panic.
func TestShutdownBeforeTheWriterStarted(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := parseGlobal(caddy.NewTestController("dns", "global {\n kubeconfig "+kubeconfig+"\n}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.build(); err != nil || g.writer == nil {
		t.Fatalf("build: %v", err)
	}
	if err := g.OnShutdown(); err != nil {
		t.Fatal(err)
	}
}
