package global

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/stanza"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/plugin/global/writer"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/plugin"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
)

// The Corefile: `global [ZONES...] { OPTION ARGS... }` is read by package stanza, for the plugin
// as for linkerd-global and the tests: the zones, and the options the outside depends on (what the
// plugin reads or writes through the API, its Lease, its topology) into contract.Options, which
// Global embeds; the plugin's own options into their fields here (parseOption, parseAPIOption).
// Adding an option: docs/design.md has the recipe. Every option's arguments are read by the
// contract's argument kinds (contract/args.go); stanza.Read locates their errors.

// Defaults.
const (
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
var defaultExplainFrom = func() answer.Networks {
	ns, err := contract.Networks("explain_from", contract.DefaultExplainFrom())
	if err != nil {
		panic(err) // constant arguments: every test of the package starts here
	}
	return ns
}()

// defaults is the plugin as a stanza without options configures it, but for the contract's options
// (contract.Defaults, which stanza.Read starts from).
func defaults() *Global {
	return &Global{
		corefile:       index.Topology{Local: defaultCluster, Unnamed: true},
		Answerer:       answer.Answerer{Maker: answer.Maker{TTL: defaultTTL, Rotate: true}, Explain: true, ExplainFrom: defaultExplainFrom},
		startupTimeout: defaultStartupTimeout,
		exportSelector: watch.DefaultExportSelector,
		writerConfig:   writer.Config{Suffix: writer.DefaultSuffix, MaxEndpoints: writer.DefaultMaxEndpoints, Workers: writerWorkers},
		election:       writer.Election{RenewDeadline: writer.DefaultRenewDeadline, RetryPeriod: writer.DefaultRetryPeriod},
		apiQPS:         defaultQPS,
		apiBurst:       defaultBurst,
	}
}

// parseGlobal parses the plugin's stanza (one per server block) into the plugin, nothing built yet.
func parseGlobal(c *caddy.Controller) (*Global, error) {
	var g *Global
	for c.Next() {
		if g != nil {
			return nil, plugin.ErrOnce
		}
		g = defaults()
		s, err := stanza.Read(&c.Dispenser, c.ServerBlockKeys, g.parseOption)
		if err != nil {
			return nil, err
		}
		g.Zones, g.Options = s.Zones, s.Options
		if err := g.check(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// parseOption parses one of the plugin's own options into its field (stanza.Own): what is watched
// and how names are answered, or else (parseAPIOption) how the API is used.
func (g *Global) parseOption(d *caddyfile.Dispenser, zones []string, opt string, args []string) (err error) {
	switch opt {
	case "prefer_namespaces":
		g.PreferNamespaces, err = contract.Namespaces(opt, args)
	case "cluster":
		err = g.parseCluster(args)
	case "ttl":
		g.TTL, err = contract.Int[uint32](opt, args, 0, 3600)
	case "fallthrough":
		g.Fall.SetZonesFromArgs(args)
	case "startup_timeout":
		g.startupTimeout, err = contract.Duration(opt, args, false)
	case "export_selector":
		g.exportSelector, err = parseSelector(args)
	case "names":
		g.MCSZones, err = parseNames(args, zones)
	case "policy":
		err = parsePolicy(args, zones, &g.Policies)
	case "rotate":
		g.Rotate, err = contract.OnOff(opt, args)
	case "explain":
		g.Explain, err = contract.OnOff(opt, args)
	case "explain_from":
		g.ExplainFrom, err = contract.Networks(opt, args)
	default:
		return g.parseAPIOption(d, opt, args)
	}
	return err
}

// parseAPIOption parses one of the plugin's own options of the API's client, of the EndpointSlice
// writer or of the writer's lease into its field.
func (g *Global) parseAPIOption(d *caddyfile.Dispenser, opt string, args []string) (err error) {
	switch opt {
	case "kubeconfig":
		err = g.parseKubeconfig(d, args)
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

// check checks what no single option can where the plugin's own options are in it (the
// contract's own rules are contract.Options.Check, which stanza.Read ran).
func (g *Global) check(c *caddy.Controller) error {
	if g.ServiceImports && g.writerConfig.Suffix == writer.MCSSuffix {
		return c.Errf("service_suffix %s would name the -global EndpointSlices as the MCS ones of serviceimports on", writer.MCSSuffix)
	}
	if e := g.leaseTimings(); !e.CheckTimings() {
		return c.Errf("lease timings must satisfy lease_duration > lease_renew_deadline > %.1f x lease_retry_period, not %v, %v, %v",
			leaderelection.JitterFactor, e.Duration, e.RenewDeadline, e.RetryPeriod)
	}
	return nil
}

// parseKubeconfig parses `kubeconfig PATH [CONTEXT]`, and where it is, for the errors found when
// the file is read.
func (g *Global) parseKubeconfig(d *caddyfile.Dispenser, args []string) error {
	if len(args) != 1 && len(args) != 2 {
		return contract.ErrArgCount
	}
	g.kubeconfig, g.kubeconfigAt = args[0], fmt.Sprintf("%s:%d - ", d.File(), d.Line())
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
		mcs, err := stanza.ZoneArgs(args[1:])
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
func parsePolicy(args, zones []string, ps *answer.Policies) error {
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
	} else if rest, err = stanza.ZoneArgs(rest); err != nil {
		return err
	}
	for _, z := range rest {
		if z != "" && !slices.Contains(zones, z) {
			return fmt.Errorf("policy: %q is not one of the plugin's zones %v", z, zones)
		}
		if _, dup := ps.Get(z); dup {
			return fmt.Errorf("policy for %s given twice", cmp.Or(z, "the instance (no zones)"))
		}
		ps.Set(z, p)
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
