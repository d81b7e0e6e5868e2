package global

import (
	"cmp"
	"errors"
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
)

// The Corefile: `global [ZONES...] { OPTION ARGS... }` parses into Global, each option into its
// field (global.go). Adding an option is its field, its case in parseOption (or parseAPIOption),
// its default in defaults when not the zero value, its README line and a test. An option the
// outside depends on (what the plugin reads or writes through the API, its Lease, its topology)
// is the contract's instead: its field and its case in contract.Options.Set, which reads it for the
// plugin and for linkerd-global alike, its access in contract.Options.Needs and docs/rbac.md, its
// hand-over in adopt, and its line in contractDiff (TestContractReadsAsThePlugin). Every option's
// arguments are read by the contract's argument kinds (contract/args.go); the errors get their
// file and line here (at).

// Defaults.
const (
	defaultZone           = contract.Name + "." // the root's: a server block for every name serves global.
	defaultCluster        = "local"
	defaultTTL            = 5
	defaultStartupTimeout = 5 * time.Second
	// API client rate, of the watches' client and of the writer's, each: the writer's first sync
	// of a large mesh is thousands of writes.
	defaultQPS    = 50
	defaultBurst  = 100
	writerWorkers = 4
)

// defaultExplainFrom is contract.DefaultExplainFrom, read as explain_from reads its arguments.
var defaultExplainFrom = func() networks {
	ns, err := contract.Networks("explain_from", contract.DefaultExplainFrom())
	if err != nil {
		panic(err) // constant arguments: every test of the package starts here
	}
	return ns
}()

// defaults is the plugin as a stanza without options configures it, but for the contract's options
// (contract.Defaults, handed over by adopt).
func defaults(zones []string) *Global {
	return &Global{
		Zones:          zones,
		corefile:       index.Topology{Local: defaultCluster, Unnamed: true},
		recordMaker:    recordMaker{ttl: defaultTTL, rotate: true},
		startupTimeout: defaultStartupTimeout,
		exportSelector: watch.DefaultExportSelector,
		writerConfig:   writer.Config{Suffix: writer.DefaultSuffix, MaxEndpoints: writer.DefaultMaxEndpoints, Workers: writerWorkers},
		election: writer.Election{
			Namespace: writer.DefaultLeaseNamespace(), RenewDeadline: writer.DefaultRenewDeadline, RetryPeriod: writer.DefaultRetryPeriod,
		},
		explain:     true,
		explainFrom: defaultExplainFrom,
		apiQPS:      defaultQPS,
		apiBurst:    defaultBurst,
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
	g, api := defaults(zones), contract.Defaults()
	seen := map[string]bool{}
	for c.NextBlock() {
		opt, args := c.Val(), c.RemainingArgs()
		if seen[opt] && opt != "locality" && opt != "policy" {
			return nil, c.Errf("%s given twice", opt)
		}
		seen[opt] = true
		known, err := api.Set(opt, args)
		if !known {
			err = g.parseOption(c, opt, args)
		}
		if err != nil {
			return nil, at(c, err)
		}
	}
	g.adopt(&api)
	if err := g.check(c, seen); err != nil {
		return nil, err
	}
	return g, nil
}

// at is err, of the option c is at, with where it is, as CoreDNS says it.
func at(c *caddy.Controller, err error) error {
	if errors.Is(err, contract.ErrArgCount) {
		return c.ArgErr()
	}
	return c.Err(err.Error())
}

// adopt hands the options the contract read (contract.Options.Set) to what uses them.
func (g *Global) adopt(o *contract.Options) {
	g.namespaces, g.linksNamespace, g.endpointSlices = o.Namespaces, o.LinksNamespace, o.Writer
	g.writerConfig.ServiceImports = o.ServiceImports
	if o.LeaseNamespace != "" {
		g.election.Namespace = o.LeaseNamespace
	}
	g.election.Name, g.election.Duration = o.LeaseName, o.LeaseDuration
	g.corefile.Locality, g.corefile.Keys, g.corefile.ClientKeys = o.Localities, o.Topology, o.ClientTopology
	g.sources = clientSources{ecs: o.ClientSource(contract.SourceECS), node: o.ClientSource(contract.SourceNode), pod: o.ClientSource(contract.SourcePod)}
	g.forwarders, g.ecsFrom, g.ecsServices = o.Forwarders, o.ECSNetworks, o.ECSServices
	if o.Owner[0] != "" {
		g.writerConfig.GCOwner = &writer.GCOwner{Resource: o.Owner[0], Name: o.Owner[1]}
	}
}

// parseOption parses one of the plugin's own options into its field: what is watched and how
// names are answered, or else (parseAPIOption) how the API is used.
func (g *Global) parseOption(c *caddy.Controller, opt string, args []string) (err error) {
	switch opt {
	case "prefer_namespaces":
		g.preferNamespaces, err = contract.Namespaces(opt, args)
	case "cluster":
		err = g.parseCluster(args)
	case "ttl":
		g.ttl, err = contract.Int[uint32](opt, args, 0, 3600)
	case "fallthrough":
		g.Fall.SetZonesFromArgs(args)
	case "startup_timeout":
		g.startupTimeout, err = contract.Duration(opt, args, false)
	case "export_selector":
		g.exportSelector, err = parseSelector(args)
	case "names":
		g.mcsZones, err = parseNames(args, g.Zones)
	case "policy":
		err = parsePolicy(args, g.Zones, &g.policies)
	case "rotate":
		g.rotate, err = contract.OnOff(opt, args)
	case "explain":
		g.explain, err = contract.OnOff(opt, args)
	case "explain_from":
		g.explainFrom, err = contract.Networks(opt, args)
	default:
		return g.parseAPIOption(c, opt, args)
	}
	return err
}

// parseAPIOption parses one of the plugin's own options of the API's client, of the EndpointSlice
// writer or of the writer's lease into its field.
func (g *Global) parseAPIOption(c *caddy.Controller, opt string, args []string) (err error) {
	switch opt {
	case "kubeconfig":
		err = g.parseKubeconfig(c, args)
	case "apiserver_qps":
		g.apiQPS, err = parseQPS(args)
	case "apiserver_burst":
		g.apiBurst, err = contract.Int[int](opt, args, 1, math.MaxInt)
	case "endpointslice_size":
		g.writerConfig.MaxEndpoints, err = contract.Int[int](opt, args, 1, writer.MaxEndpointsLimit)
	case "service_suffix":
		g.writerConfig.Suffix, err = parseSuffix(args)
	case "lease_renew_deadline":
		g.election.RenewDeadline, err = contract.Duration(opt, args, true)
	case "lease_retry_period":
		g.election.RetryPeriod, err = contract.Duration(opt, args, true)
	default:
		return fmt.Errorf("unknown property %q", opt)
	}
	return err
}

// check checks what no single option can: the options that must agree (seen: those given).
func (g *Global) check(c *caddy.Controller, seen map[string]bool) error {
	if g.writerConfig.ServiceImports && !g.endpointSlices {
		return c.Errf("serviceimports on needs the writer: it cannot be on with endpointslices off")
	}
	if g.writerConfig.ServiceImports && g.writerConfig.Suffix == writer.MCSSuffix {
		return c.Errf("service_suffix %s would name the -global EndpointSlices as the MCS ones of serviceimports on", writer.MCSSuffix)
	}
	if seen["client_forwarders"] && g.sources == (clientSources{}) {
		return c.Errf("client_forwarders needs client_locality: only answers ranked from the client tell forwarders apart")
	}
	if seen["client_ecs_from"] != g.sources.ecs {
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
		zones, err := zoneArgs(args)
		if err != nil {
			return nil, c.Err(err.Error())
		}
		return zones, nil
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
func zoneArgs(args []string) ([]string, error) {
	var zones []string
	for _, a := range args {
		zs := plugin.Host(a).NormalizeExact()
		if len(zs) == 0 {
			return nil, fmt.Errorf("zone %q is not a domain name made of DNS labels", a)
		}
		for _, z := range zs {
			if !validZone(z) {
				return nil, fmt.Errorf("zone %q is not a domain name made of DNS labels", z)
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
		return contract.ErrArgCount
	}
	g.kubeconfig, g.kubeconfigAt = args[0], fmt.Sprintf("%s:%d - ", c.File(), c.Line())
	if len(args) == 2 {
		g.kubeContext = args[1]
	}
	return nil
}

// parseCluster parses `cluster NAME`, this cluster's name.
func (g *Global) parseCluster(args []string) error {
	if len(args) != 1 {
		return contract.ErrArgCount
	}
	if err := contract.Label("cluster name", args[0]); err != nil {
		return err
	}
	g.corefile.Local, g.corefile.Unnamed = args[0], false
	return nil
}

// parseSelector parses `export_selector SELECTOR`, a label selector of spaced words.
func parseSelector(args []string) (string, error) {
	if len(args) == 0 {
		return "", contract.ErrArgCount
	}
	s := strings.Join(args, " ")
	if _, err := labels.Parse(s); err != nil {
		return "", fmt.Errorf("export_selector %q: %v", s, err)
	}
	return s, nil
}

// parseQPS parses `apiserver_qps QPS`.
func parseQPS(args []string) (float32, error) {
	if len(args) != 1 {
		return 0, contract.ErrArgCount
	}
	q, err := strconv.ParseFloat(args[0], 32)
	if err != nil || q <= 0 {
		return 0, fmt.Errorf("apiserver_qps must be a number > 0, not %q", args[0])
	}
	return float32(q), nil
}

// parseSuffix parses `service_suffix SUFFIX`, which must end a Service name.
func parseSuffix(args []string) (string, error) {
	if len(args) != 1 {
		return "", contract.ErrArgCount
	}
	if errs := validation.IsDNS1035Label("a" + args[0]); len(errs) > 0 || args[0] == "" {
		return "", fmt.Errorf("service_suffix %q cannot end a Service name: %s", args[0], strings.Join(errs, "; "))
	}
	return args[0], nil
}

// parseNames parses `names global` or `names mcs [ZONES...]`: the zones (default all) answered
// with the Multi-Cluster Services specification's names.
func parseNames(args, zones []string) ([]string, error) {
	switch {
	case len(args) == 1 && args[0] == "global":
		return nil, nil
	case len(args) == 1 && args[0] == "mcs":
		return zones, nil
	case len(args) > 1 && args[0] == "mcs":
		mcs, err := zoneArgs(args[1:])
		if err != nil {
			return nil, err
		}
		for _, z := range mcs {
			if !slices.Contains(zones, z) {
				return nil, fmt.Errorf("names mcs: %q is not one of the plugin's zones %v", z, zones)
			}
		}
		return mcs, nil
	}
	return nil, fmt.Errorf("names takes global or mcs [ZONES...], not %q", strings.Join(args, " "))
}

// parsePolicy parses `policy all|nearest [N] [ZONES...]` into policies: the policy of the zones
// given (each one of the plugin's zones, each once), or without zones the instance's default, under
// "" (once).
func parsePolicy(args, zones []string, ps *policies) error {
	if len(args) == 0 {
		return contract.ErrArgCount
	}
	mode, rest := args[0], args[1:]
	if _, err := strconv.Atoi(firstOf(rest)); mode == "nearest" && err == nil {
		mode, rest = mode+" "+rest[0], rest[1:]
	}
	p, err := index.ParsePolicy(mode)
	if err != nil {
		return fmt.Errorf("policy: %v", err)
	}
	if len(rest) == 0 {
		rest = []string{""}
	} else if rest, err = zoneArgs(rest); err != nil {
		return err
	}
	for _, z := range rest {
		if z != "" && !slices.Contains(zones, z) {
			return fmt.Errorf("policy: %q is not one of the plugin's zones %v", z, zones)
		}
		if _, dup := ps.get(z); dup {
			return fmt.Errorf("policy for %s given twice", cmp.Or(z, "the instance (no zones)"))
		}
		ps.set(z, p)
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
