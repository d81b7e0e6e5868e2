package global

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/plugin/global/writer"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
)

// The Corefile: `global [ZONES...] { OPTION ARGS... }` parses into Global, each option into its
// field (global.go). Adding an option is its field, its case in parseOption (or parseAPIOption),
// its default in defaults when not the zero value, its README line and a test. An option the
// outside depends on (what the plugin reads or writes through the API, its Lease, its topology)
// is in the contract too: its case in contract.Options.set (what linkerd-global's check reads),
// its access in contract.Options.Needs and docs/rbac.md, and its line in contractDiff
// (TestContractReadsAsThePlugin).

// Defaults.
const (
	defaultZone           = "global." // the root's: a server block for every name serves global.
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

// defaults is the plugin as a stanza without options configures it.
func defaults(zones []string) *Global {
	return &Global{
		Zones: zones,
		corefile: index.Topology{Local: defaultCluster, Unnamed: true, Keys: index.DefaultKeys, ClientKeys: index.DefaultClientKeys,
			Locality: map[string]map[string]string{}},
		recordMaker:    recordMaker{ttl: defaultTTL, rotate: true},
		startupTimeout: defaultStartupTimeout,
		exportSelector: watch.DefaultExportSelector,
		linksNamespace: watch.DefaultLinksNamespace,
		endpointSlices: true,
		writerConfig:   writer.Config{Suffix: writer.DefaultSuffix, MaxEndpoints: writer.DefaultMaxEndpoints, Workers: writerWorkers},
		election: writer.Election{
			Namespace: writer.DefaultLeaseNamespace(), Name: writer.DefaultLeaseName,
			Duration: writer.DefaultLeaseDuration, RenewDeadline: writer.DefaultRenewDeadline, RetryPeriod: writer.DefaultRetryPeriod,
		},
		explain:  true,
		apiQPS:   defaultQPS,
		apiBurst: defaultBurst,
	}
}

// parseGlobal parses the plugin's stanza (one per server block) into the plugin, nothing built yet.
func parseGlobal(c *caddy.Controller) (*Global, error) {
	var g *Global
	for c.Next() {
		if g != nil {
			return nil, plugin.ErrOnce
		}
		var err error
		if g, err = parseStanza(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// parseStanza parses `global [ZONES...] { OPTIONS }`: each option once, but locality and policy.
func parseStanza(c *caddy.Controller) (*Global, error) {
	zones, err := parseZones(c, c.RemainingArgs())
	if err != nil {
		return nil, err
	}
	g := defaults(zones)
	seen := map[string]bool{}
	for c.NextBlock() {
		opt, args := c.Val(), c.RemainingArgs()
		if seen[opt] && opt != "locality" && opt != "policy" {
			return nil, c.Errf("%s given twice", opt)
		}
		seen[opt] = true
		if err := g.parseOption(c, opt, args); err != nil {
			return nil, err
		}
	}
	if err := g.check(c); err != nil {
		return nil, err
	}
	return g, nil
}

// parseOption parses one option into its field: what is watched and how names are answered, or
// else (parseAPIOption) how the API is used.
func (g *Global) parseOption(c *caddy.Controller, opt string, args []string) (err error) {
	switch opt {
	case "namespaces":
		g.namespaces, err = namesArg(c, opt, args)
	case "prefer_namespaces":
		g.preferNamespaces, err = namesArg(c, opt, args)
	case "cluster":
		err = g.parseCluster(c, args)
	case "locality":
		err = parseLocality(c, args, g.corefile.Locality)
	case "topology":
		g.corefile.Keys, g.corefile.ClientKeys, err = parseTopology(c, args)
	case "client_locality":
		g.sources, err = parseClientSources(c, args)
	case "client_forwarders":
		g.forwarders, err = servicesArg(c, opt, args)
	case "client_ecs_from":
		err = g.parseECSFrom(c, opt, args)
	case "ttl":
		g.ttl, err = intArg[uint32](c, opt, args, 0, 3600)
	case "fallthrough":
		g.Fall.SetZonesFromArgs(args)
	case "startup_timeout":
		g.startupTimeout, err = durationArg(c, opt, args, false)
	case "export_selector":
		g.exportSelector, err = parseSelector(c, args)
	case "links_namespace":
		g.linksNamespace, err = nameArg(c, opt, args)
	case "names":
		g.mcsZones, err = parseNames(c, args, g.Zones)
	case "policy":
		err = parsePolicy(c, args, g.Zones, &g.policies)
	case "rotate":
		g.rotate, err = onOff(c, opt, args)
	case "explain":
		g.explain, err = onOff(c, opt, args)
	case "explain_from":
		g.explainFrom, err = networksArg(c, opt, args)
	default:
		return g.parseAPIOption(c, opt, args)
	}
	return err
}

// parseAPIOption parses one option of the API's client, of the EndpointSlice writer or of the
// writer's lease into its field.
func (g *Global) parseAPIOption(c *caddy.Controller, opt string, args []string) (err error) {
	switch opt {
	case "kubeconfig":
		err = g.parseKubeconfig(c, args)
	case "apiserver_qps":
		g.apiQPS, err = parseQPS(c, args)
	case "apiserver_burst":
		g.apiBurst, err = intArg[int](c, opt, args, 1, math.MaxInt)
	case "endpointslices":
		g.endpointSlices, err = onOff(c, opt, args)
	case "serviceimports":
		g.writerConfig.ServiceImports, err = onOff(c, opt, args)
	case "endpointslice_size":
		g.writerConfig.MaxEndpoints, err = intArg[int](c, opt, args, 1, writer.MaxEndpointsLimit)
	case "service_suffix":
		g.writerConfig.Suffix, err = parseSuffix(c, args)
	case "owner":
		g.writerConfig.GCOwner, err = parseOwner(c, args)
	case "lease":
		err = g.parseLease(c, args)
	case "lease_duration":
		g.election.Duration, err = durationArg(c, opt, args, true)
	case "lease_renew_deadline":
		g.election.RenewDeadline, err = durationArg(c, opt, args, true)
	case "lease_retry_period":
		g.election.RetryPeriod, err = durationArg(c, opt, args, true)
	default:
		return c.Errf("unknown property %q", opt)
	}
	return err
}

// check checks what no single option can: the options that must agree.
func (g *Global) check(c *caddy.Controller) error {
	if g.writerConfig.ServiceImports && !g.endpointSlices {
		return c.Errf("serviceimports on needs the writer: it cannot be on with endpointslices off")
	}
	if g.writerConfig.ServiceImports && g.writerConfig.Suffix == writer.MCSSuffix {
		return c.Errf("service_suffix %s would name the -global EndpointSlices as the MCS ones of serviceimports on", writer.MCSSuffix)
	}
	if g.forwarders != nil && g.sources == (clientSources{}) {
		return c.Errf("client_forwarders needs client_locality: only answers ranked from the client tell forwarders apart")
	}
	if (g.ecsFrom != nil || g.ecsServices != nil) != g.sources.ecs {
		return c.Errf("client_locality ecs and client_ecs_from go together: client_ecs_from names the resolvers trusted to set the option")
	}
	if g.writerConfig.GCOwner != nil && !g.endpointSlices {
		return c.Errf("owner needs the writer: it cannot be set with endpointslices off")
	}
	if !g.election.CheckTimings() {
		return c.Errf("lease timings must satisfy lease_duration > lease_renew_deadline > %.1f x lease_retry_period, not %v, %v, %v",
			leaderelection.JitterFactor, g.election.Duration, g.election.RenewDeadline, g.election.RetryPeriod)
	}
	return nil
}

// parseZones returns the plugin's zones: its arguments, or else its server block's, as every
// CoreDNS plugin does, with the root's being global.: CoreDNS gives the block only the queries
// below its zones, so a plugin serving other zones would never be asked.
func parseZones(c *caddy.Controller, args []string) ([]string, error) {
	if len(args) > 0 {
		return zoneArgs(c, args)
	}
	var zones []string
	for _, z := range plugin.OriginsFromArgsOrServerBlock(nil, c.ServerBlockKeys) {
		if z == "." {
			z = defaultZone
		}
		if !validZone(z) {
			return nil, c.Errf("server block zone %q is not a domain name made of DNS labels: give the plugin its zones as arguments", z)
		}
		if !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	if len(zones) == 0 { // no server block: a test's controller
		zones = []string{defaultZone}
	}
	return zones, nil
}

// zoneArgs normalizes zone arguments; each must be a domain name.
func zoneArgs(c *caddy.Controller, args []string) ([]string, error) {
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

// parseKubeconfig parses `kubeconfig PATH [CONTEXT]`, and where it is, for the errors found when
// the file is read.
func (g *Global) parseKubeconfig(c *caddy.Controller, args []string) error {
	if len(args) != 1 && len(args) != 2 {
		return c.ArgErr()
	}
	g.kubeconfig, g.kubeconfigAt = args[0], fmt.Sprintf("%s:%d - ", c.File(), c.Line())
	if len(args) == 2 {
		g.kubeContext = args[1]
	}
	return nil
}

// parseCluster parses `cluster NAME`, this cluster's name.
func (g *Global) parseCluster(c *caddy.Controller, args []string) error {
	if len(args) != 1 {
		return c.ArgErr()
	}
	if err := dnsLabel(c, "cluster name", args[0]); err != nil {
		return err
	}
	g.corefile.Local, g.corefile.Unnamed = args[0], false
	return nil
}

// parseSelector parses `export_selector SELECTOR`, a label selector of spaced words.
func parseSelector(c *caddy.Controller, args []string) (string, error) {
	if len(args) == 0 {
		return "", c.ArgErr()
	}
	s := strings.Join(args, " ")
	if _, err := labels.Parse(s); err != nil {
		return "", c.Errf("export_selector %q: %v", s, err)
	}
	return s, nil
}

// parseQPS parses `apiserver_qps QPS`.
func parseQPS(c *caddy.Controller, args []string) (float32, error) {
	if len(args) != 1 {
		return 0, c.ArgErr()
	}
	q, err := strconv.ParseFloat(args[0], 32)
	if err != nil || q <= 0 {
		return 0, c.Errf("apiserver_qps must be a number > 0, not %q", args[0])
	}
	return float32(q), nil
}

// parseSuffix parses `service_suffix SUFFIX`, which must end a Service name.
func parseSuffix(c *caddy.Controller, args []string) (string, error) {
	if len(args) != 1 {
		return "", c.ArgErr()
	}
	if errs := validation.IsDNS1035Label("a" + args[0]); len(errs) > 0 || args[0] == "" {
		return "", c.Errf("service_suffix %q cannot end a Service name: %s", args[0], strings.Join(errs, "; "))
	}
	return args[0], nil
}

// parseLease parses `lease NAMESPACE NAME`.
func (g *Global) parseLease(c *caddy.Controller, args []string) error {
	if len(args) != 2 {
		return c.ArgErr()
	}
	if err := dnsLabel(c, "lease namespace", args[0]); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(args[1]); len(errs) > 0 {
		return c.Errf("lease name %q: %s", args[1], strings.Join(errs, "; "))
	}
	g.election.Namespace, g.election.Name = args[0], args[1]
	return nil
}

// parseOwner parses `owner RESOURCE NAME`: the cluster-scoped object, one of the resources
// writer.OwnerResources, that owns the Services and ServiceImports written.
func parseOwner(c *caddy.Controller, args []string) (*writer.GCOwner, error) {
	if len(args) != 2 {
		return nil, c.ArgErr()
	}
	if !slices.Contains(writer.OwnerResources(), args[0]) {
		return nil, c.Errf("owner: %q is not one of the cluster-scoped resources %s", args[0], strings.Join(writer.OwnerResources(), ", "))
	}
	if errs := path.IsValidPathSegmentName(args[1]); len(errs) > 0 {
		return nil, c.Errf("owner name %q: %s", args[1], strings.Join(errs, "; "))
	}
	return &writer.GCOwner{Resource: args[0], Name: args[1]}, nil
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
		mcs, err := zoneArgs(c, args[1:])
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
func parsePolicy(c *caddy.Controller, args, zones []string, ps *policies) error {
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
	} else if rest, err = zoneArgs(c, rest); err != nil {
		return err
	}
	for _, z := range rest {
		if z != "" && !slices.Contains(zones, z) {
			return c.Errf("policy: %q is not one of the plugin's zones %v", z, zones)
		}
		if _, dup := ps.get(z); dup {
			return c.Errf("policy for %s given twice", cmp.Or(z, "the instance (no zones)"))
		}
		ps.set(z, p)
	}
	return nil
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

// parseTopology parses `topology KEYS...`, the preference keys: those of the cluster's tiers, and
// all of them, hostname and cluster included, for a known client's.
func parseTopology(c *caddy.Controller, args []string) (clusterKeys, clientKeys []string, err error) {
	if len(args) == 0 || len(args) > maxTopologyKeys {
		return nil, nil, c.Errf("topology takes 1 to %d keys", maxTopologyKeys)
	}
	for _, a := range args {
		k, locality := contract.TopologyKey(a)
		if locality {
			if k, err = localityKey(c, a); err != nil {
				return nil, nil, err
			}
			clusterKeys = append(clusterKeys, k)
		}
		if slices.Contains(clientKeys, k) {
			return nil, nil, c.Errf("topology lists %s twice", k)
		}
		clientKeys = append(clientKeys, k)
	}
	return clusterKeys, clientKeys, nil
}

// parseClientSources parses `client_locality SOURCE...`: ecs, node or pod, each once.
func parseClientSources(c *caddy.Controller, args []string) (clientSources, error) {
	var s clientSources
	if len(args) == 0 {
		return s, c.ArgErr()
	}
	for i, a := range args {
		if slices.Contains(args[:i], a) {
			return s, c.Errf("client_locality lists %s twice", a)
		}
		switch a {
		case sourceECS:
			s.ecs = true
		case sourceNode:
			s.node = true
		case sourcePod:
			s.pod = true
		default:
			return s, c.Errf("client_locality takes ecs, node or pod, not %q", a)
		}
	}
	return s, nil
}
