package global

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/plugin/global/writer"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/plugin"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/util/flowcontrol"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

func init() {
	plugin.Register(telemetry.Plugin, setup)
	// CoreDNS refuses every class but IN unless a plugin of the server block is listed here; the
	// explanations are CH TXT. ServeDNS refuses other classes itself (and CH with explain off).
	dnsserver.EnableChaos[telemetry.Plugin] = struct{}{}
}

// Defaults.
const (
	defaultZone           = "global."
	defaultCluster        = "local"
	defaultTTL            = 5
	defaultStartupTimeout = 5 * time.Second
	maxTopologyKeys       = 16
	// API client rate, of the watches' client and of the writer's, each: the writer's first sync
	// of a large mesh is thousands of writes.
	defaultQPS    = 50
	defaultBurst  = 100
	writerWorkers = 4
)

// config is what the Corefile says, before anything talks to the API.
type config struct {
	zones            []string
	kubeconfig       string
	context          string
	kubeconfigAt     string // file:line of the kubeconfig option, for errors found when reading it
	namespaces       []string
	topology         index.Topology
	ttl              uint32
	startupTimeout   time.Duration
	preferNamespaces []string
	exportSelector   string
	apiQPS           float32
	apiBurst         int
	write            bool // endpointslices on
	writer           writer.Config
	election         writer.Election
	g                *Global // the fields parse fills directly (Fall)
}

func setup(c *caddy.Controller) error {
	telemetry.RouteKlog()
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error(telemetry.Plugin, err)
	}
	g, err := cfg.build()
	if err != nil {
		return plugin.Error(telemetry.Plugin, err)
	}
	c.OnStartup(func() error { g.nsAddrs = boundAddrs(dnsserver.GetConfig(c).ListenHosts); return nil })
	c.OnStartup(g.OnStartup)
	c.OnShutdown(g.OnShutdown)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		g.Next = next
		return g
	})
	return nil
}

// build connects the parsed configuration to the API: client, watcher and index. Nothing runs yet.
func (cfg *config) build() (*Global, error) {
	rc, err := cfg.restConfig()
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = cfg.apiQPS, cfg.apiBurst
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	w, err := watch.New(client, cfg.namespaces, cfg.exportSelector)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	g := cfg.g
	g.Zones, g.ttl, g.startupTimeout, g.preferNamespaces = cfg.zones, cfg.ttl, cfg.startupTimeout, cfg.preferNamespaces
	g.watcher = w
	g.corefile, g.topology = &cfg.topology, watch.NewTopology(dyn, meta, client.Discovery(), cfg.topology.Keys)
	g.index = index.New(&cfg.topology, w)
	cfg.writer.Owner = writer.Owner(cfg.election.Namespace, cfg.election.Name)
	if !cfg.write {
		g.leftovers = func(ctx context.Context) { writer.Leftovers(ctx, client, cfg.namespaces, cfg.writer.Owner) }
	} else {
		// The writer (its writes, its Events, the informers on its own objects) has a client of
		// its own, so a token bucket of its own at the same rate: a large first sync queues a
		// write per object, and the watches' lists must not wait behind them.
		wrc := rest.CopyConfig(rc)
		wrc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst) // shared with its ServiceImport client
		wclient, err := kubernetes.NewForConfig(wrc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		// ServiceImports are custom resources: JSON only. The client exists with serviceimports
		// off too, to delete what was written while it was on.
		mrc := rest.CopyConfig(wrc)
		mrc.ContentType = "application/json"
		mclient, err := mcsclient.NewForConfig(mrc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		// So has the lease, whose requests time out: a renewal or release that hangs must not
		// keep a replica that lost the lease writing. It is not rate-limited: the elector makes
		// one request at a time, at most two per lease_retry_period, and a renewal that waited
		// on a low apiserver_qps would lose the lease.
		erc := rest.CopyConfig(rc)
		erc.Timeout = cfg.election.RetryPeriod
		erc.QPS = -1
		if g.electionClient, err = kubernetes.NewForConfig(erc); err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		g.writer = writer.New(wclient, mclient, g.index, cfg.namespaces, cfg.writer)
		g.election = cfg.election
	}
	return g, nil
}

func (cfg *config) restConfig() (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	path := cfg.kubeconfig
	if path == "" {
		// In a pod, the pod's ServiceAccount; outside one, $KUBECONFIG, as kubectl would.
		if rc, err = rest.InClusterConfig(); err != nil {
			if path = os.Getenv("KUBECONFIG"); path == "" {
				return nil, fmt.Errorf("no kubeconfig given, KUBECONFIG unset, and not running in a Kubernetes pod: %w", err)
			}
		}
	}
	if path != "" {
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
			&clientcmd.ConfigOverrides{CurrentContext: cfg.context})
		if rc, err = loader.ClientConfig(); err != nil {
			return nil, fmt.Errorf("%skubeconfig %s: %w", cfg.kubeconfigAt, path, err)
		}
	}
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.UserAgent = fmt.Sprintf("coredns-%s/%s git_commit:%s", telemetry.Plugin, coremain.CoreVersion, coremain.GitCommit)
	return rc, nil
}

func parse(c *caddy.Controller) (*config, error) {
	var cfg *config
	for c.Next() {
		if cfg != nil {
			return nil, plugin.ErrOnce
		}
		var err error
		if cfg, err = parseStanza(c); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// onOff parses an option that takes on (also no argument) or off.
func onOff(c *caddy.Controller, opt string, args []string) (bool, error) {
	switch {
	case len(args) == 0, len(args) == 1 && args[0] == "on":
		return true, nil
	case len(args) == 1 && args[0] == "off":
		return false, nil
	}
	return false, c.Errf("%s takes on or off, not %q", opt, strings.Join(args, " "))
}

func parseStanza(c *caddy.Controller) (*config, error) {
	zones, err := parseZones(c, c.RemainingArgs())
	if err != nil {
		return nil, err
	}
	cfg := &config{
		zones:          zones,
		topology:       index.Topology{Local: defaultCluster, Unnamed: true, Keys: index.DefaultKeys, Locality: map[string]map[string]string{}},
		ttl:            defaultTTL,
		startupTimeout: defaultStartupTimeout,
		exportSelector: watch.DefaultExportSelector,
		apiQPS:         defaultQPS,
		apiBurst:       defaultBurst,
		write:          true,
		writer:         writer.Config{Suffix: writer.DefaultSuffix, MaxEndpoints: writer.DefaultMaxEndpoints, Workers: writerWorkers},
		election: writer.Election{
			Namespace: writer.DefaultLeaseNamespace(), Name: writer.DefaultLeaseName,
			Duration: writer.DefaultLeaseDuration, RenewDeadline: writer.DefaultRenewDeadline, RetryPeriod: writer.DefaultRetryPeriod,
		},
		g: &Global{rotate: true, explain: true, policies: map[string]index.Policy{}},
	}
	seen := map[string]bool{}
	for c.NextBlock() {
		opt := c.Val()
		args := c.RemainingArgs()
		if seen[opt] && opt != "locality" && opt != "policy" {
			return nil, c.Errf("%s given twice", opt)
		}
		seen[opt] = true
		var err error
		switch opt {
		case "kubeconfig":
			if len(args) != 1 && len(args) != 2 {
				return nil, c.ArgErr()
			}
			cfg.kubeconfig, cfg.kubeconfigAt = args[0], fmt.Sprintf("%s:%d - ", c.File(), c.Line())
			if len(args) == 2 {
				cfg.context = args[1]
			}
		case "namespaces":
			cfg.namespaces, err = namesArg(c, opt, args)
		case "prefer_namespaces":
			cfg.preferNamespaces, err = namesArg(c, opt, args)
		case "cluster":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			if err = dnsLabel(c, "cluster name", args[0]); err == nil {
				cfg.topology.Local, cfg.topology.Unnamed = args[0], false
			}
		case "locality":
			err = parseLocality(c, args, cfg.topology.Locality)
		case "topology":
			cfg.topology.Keys, err = parseTopology(c, args)
		case "ttl":
			var t int
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			if t, err = strconv.Atoi(args[0]); err != nil || t < 0 || t > 3600 {
				return nil, c.Errf("ttl must be an integer in [0, 3600], not %q", args[0])
			}
			cfg.ttl = uint32(t)
		case "fallthrough":
			cfg.g.Fall.SetZonesFromArgs(args)
		case "startup_timeout":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			if cfg.startupTimeout, err = time.ParseDuration(args[0]); err != nil || cfg.startupTimeout < 0 {
				return nil, c.Errf("startup_timeout must be a duration >= 0, not %q", args[0])
			}
		case "export_selector":
			if len(args) == 0 {
				return nil, c.ArgErr()
			}
			cfg.exportSelector = strings.Join(args, " ")
			if _, perr := labels.Parse(cfg.exportSelector); perr != nil {
				return nil, c.Errf("export_selector %q: %v", cfg.exportSelector, perr)
			}
		case "endpointslices":
			cfg.write, err = onOff(c, opt, args)
		case "serviceimports":
			cfg.writer.ServiceImports, err = onOff(c, opt, args)
		case "names":
			cfg.g.mcsZones, err = parseNames(c, args, zones)
		case "policy":
			err = parsePolicy(c, args, zones, cfg.g.policies)
		case "rotate":
			cfg.g.rotate, err = onOff(c, opt, args)
		case "explain":
			cfg.g.explain, err = onOff(c, opt, args)
		case "endpointslice_size":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			n, aerr := strconv.Atoi(args[0])
			if aerr != nil || n < 1 || n > writer.MaxEndpointsLimit {
				return nil, c.Errf("endpointslice_size must be an integer in [1, %d], not %q", writer.MaxEndpointsLimit, args[0])
			}
			cfg.writer.MaxEndpoints = n
		case "service_suffix":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			if errs := validation.IsDNS1035Label("a" + args[0]); len(errs) > 0 || args[0] == "" {
				return nil, c.Errf("service_suffix %q cannot end a Service name: %s", args[0], strings.Join(errs, "; "))
			}
			cfg.writer.Suffix = args[0]
		case "lease":
			if len(args) != 2 {
				return nil, c.ArgErr()
			}
			if err = dnsLabel(c, "lease namespace", args[0]); err == nil {
				if errs := validation.IsDNS1123Subdomain(args[1]); len(errs) > 0 {
					return nil, c.Errf("lease name %q: %s", args[1], strings.Join(errs, "; "))
				}
				cfg.election.Namespace, cfg.election.Name = args[0], args[1]
			}
		case "lease_duration", "lease_renew_deadline", "lease_retry_period":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			d, derr := time.ParseDuration(args[0])
			if derr != nil || d <= 0 {
				return nil, c.Errf("%s must be a positive duration, not %q", opt, args[0])
			}
			dst := map[string]*time.Duration{
				"lease_duration":       &cfg.election.Duration,
				"lease_renew_deadline": &cfg.election.RenewDeadline,
				"lease_retry_period":   &cfg.election.RetryPeriod,
			}[opt]
			*dst = d
		case "apiserver_qps":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			q, perr := strconv.ParseFloat(args[0], 32)
			if perr != nil || q <= 0 {
				return nil, c.Errf("apiserver_qps must be a number > 0, not %q", args[0])
			}
			cfg.apiQPS = float32(q)
		case "apiserver_burst":
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			b, aerr := strconv.Atoi(args[0])
			if aerr != nil || b < 1 {
				return nil, c.Errf("apiserver_burst must be an integer >= 1, not %q", args[0])
			}
			cfg.apiBurst = b
		default:
			return nil, c.Errf("unknown property %q", opt)
		}
		if err != nil {
			return nil, err
		}
	}
	if cfg.writer.ServiceImports && !cfg.write {
		return nil, c.Errf("serviceimports on needs the writer: it cannot be on with endpointslices off")
	}
	if cfg.writer.ServiceImports && cfg.writer.Suffix == writer.MCSSuffix {
		return nil, c.Errf("service_suffix %s would name the -global EndpointSlices as the MCS ones of serviceimports on", writer.MCSSuffix)
	}
	if !cfg.election.CheckTimings() {
		return nil, c.Errf("lease timings must satisfy lease_duration > lease_renew_deadline > %.1f x lease_retry_period, not %v, %v, %v",
			leaderelection.JitterFactor, cfg.election.Duration, cfg.election.RenewDeadline, cfg.election.RetryPeriod)
	}
	return cfg, nil
}

// parseZones normalizes the zone arguments (default: global.); each must be a domain name.
func parseZones(c *caddy.Controller, args []string) ([]string, error) {
	if len(args) == 0 {
		return []string{defaultZone}, nil
	}
	var zones []string
	for _, a := range args {
		zs := plugin.Host(a).NormalizeExact()
		if len(zs) == 0 {
			return nil, c.Errf("zone %q is not a domain name made of DNS labels", a)
		}
		for _, z := range zs {
			if !validZone(z) {
				return nil, c.Errf("zone %q is not a domain name made of DNS labels", z)
			}
		}
		zones = append(zones, zs...)
	}
	return zones, nil
}

// parseNames parses `names global` or `names mcs [ZONES...]`: the zones (default all) answered
// with the Multi-Cluster Services specification's names.
func parseNames(c *caddy.Controller, args, zones []string) ([]string, error) {
	switch {
	case len(args) == 1 && args[0] == "global":
		return nil, nil
	case len(args) == 1 && args[0] == "mcs":
		return zones, nil
	case len(args) > 1 && args[0] == "mcs":
		mcs, err := parseZones(c, args[1:])
		if err != nil {
			return nil, err
		}
		for _, z := range mcs {
			if !slices.Contains(zones, z) {
				return nil, c.Errf("names mcs: %q is not one of the plugin's zones %v", z, zones)
			}
		}
		return mcs, nil
	}
	return nil, c.Errf("names takes global or mcs [ZONES...], not %q", strings.Join(args, " "))
}

// parsePolicy parses `policy all|nearest [N] [ZONES...]` into policies: the policy of the zones
// given (each one of the plugin's zones, each once), or without zones the instance's default, under
// "" (once).
func parsePolicy(c *caddy.Controller, args, zones []string, policies map[string]index.Policy) error {
	if len(args) == 0 {
		return c.ArgErr()
	}
	mode, rest := args[0], args[1:]
	if _, err := strconv.Atoi(firstOf(rest)); mode == "nearest" && err == nil {
		mode, rest = mode+" "+rest[0], rest[1:]
	}
	p, err := index.ParsePolicy(mode)
	if err != nil {
		return c.Errf("policy: %v", err)
	}
	if len(rest) == 0 {
		rest = []string{""}
	} else if rest, err = parseZones(c, rest); err != nil {
		return err
	}
	for _, z := range rest {
		if z != "" && !slices.Contains(zones, z) {
			return c.Errf("policy: %q is not one of the plugin's zones %v", z, zones)
		}
		if _, dup := policies[z]; dup {
			return c.Errf("policy for %s given twice", cmp.Or(z, "the instance (no zones)"))
		}
		policies[z] = p
	}
	return nil
}

// firstOf is the first of args, "" when there is none.
func firstOf(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// namesArg parses a list of namespace names.
func namesArg(c *caddy.Controller, opt string, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, c.ArgErr()
	}
	for i, a := range args {
		if err := dnsLabel(c, opt+" entry", a); err != nil {
			return nil, err
		}
		if slices.Contains(args[:i], a) {
			return nil, c.Errf("%s lists %q twice", opt, a)
		}
	}
	return args, nil
}

// parseLocality parses `locality CLUSTER KEY=VALUE...` into loc.
func parseLocality(c *caddy.Controller, args []string, loc map[string]map[string]string) error {
	if len(args) < 2 {
		return c.ArgErr()
	}
	cluster := args[0]
	if err := dnsLabel(c, "locality cluster", cluster); err != nil {
		return err
	}
	if _, dup := loc[cluster]; dup {
		return c.Errf("locality for cluster %q given twice", cluster)
	}
	kv := map[string]string{}
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return c.Errf("locality %s: %q is not KEY=VALUE", cluster, a)
		}
		k, err := localityKey(c, k)
		if err != nil {
			return err
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 || v == "" {
			return c.Errf("locality %s: value %q of %s is not a label value", cluster, v, k)
		}
		if _, dup := kv[k]; dup {
			return c.Errf("locality %s: %s given twice", cluster, k)
		}
		kv[k] = v
	}
	loc[cluster] = kv
	return nil
}

func parseTopology(c *caddy.Controller, args []string) ([]string, error) {
	if len(args) == 0 || len(args) > maxTopologyKeys {
		return nil, c.Errf("topology takes 1 to %d keys", maxTopologyKeys)
	}
	keys := make([]string, 0, len(args))
	for _, a := range args {
		k, err := localityKey(c, a)
		if err != nil {
			return nil, err
		}
		if slices.Contains(keys, k) {
			return nil, c.Errf("topology lists %s twice", k)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// localityKey expands the short forms zone and region and checks the key is a label key.
func localityKey(c *caddy.Controller, k string) (string, error) {
	switch k {
	case "zone":
		return index.ZoneKey, nil
	case "region":
		return index.RegionKey, nil
	}
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return "", c.Errf("%q is not a label key: %s", k, strings.Join(errs, "; "))
	}
	return k, nil
}

func dnsLabel(c *caddy.Controller, what, s string) error {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return c.Errf("%s %q is not a DNS label: %s", what, s, strings.Join(errs, "; "))
	}
	return nil
}

// validZone reports whether zone (normalized, with its final dot) is below the root and made of
// DNS-1123 labels: every name we answer is built from such labels.
func validZone(zone string) bool {
	if zone == "." {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(zone, "."), ".") {
		if len(validation.IsDNS1123Label(l)) > 0 {
			return false
		}
	}
	return true
}

// boundAddrs returns the non-loopback addresses the server listens on (every interface address
// when it listens on all): what ns1.dns.<zone> answers with.
func boundAddrs(hosts []string) []netip.Addr {
	if len(hosts) == 0 || hosts[0] == "" {
		hosts = nil
		ifaddrs, err := net.InterfaceAddrs()
		if err != nil {
			return nil
		}
		for _, a := range ifaddrs {
			hosts = append(hosts, a.String())
		}
	}
	var out []netip.Addr
	for _, h := range hosts {
		a, err := netip.ParseAddr(h)
		if err != nil {
			p, perr := netip.ParsePrefix(h)
			if perr != nil {
				continue
			}
			a = p.Addr()
		}
		if a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a.Unmap())
	}
	return out
}
