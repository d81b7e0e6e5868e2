package main

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/coredns/caddy/caddyfile"
	"github.com/miekg/dns"
)

// The locality keys and the writer's Lease as plugin/global names them by default.
const (
	zoneKey              = "topology.kubernetes.io/zone"
	regionKey            = "topology.kubernetes.io/region"
	defaultLeaseName     = "coredns-global-writer"
	defaultLeaseDuration = 15 * time.Second
	// defaultLinksNamespace is links_namespace's default, Linkerd's multicluster namespace.
	defaultLinksNamespace = "linkerd-multicluster"
)

// pluginConfig is what the checks need of the global plugin's Corefile options (plugin/global/README.md).
type pluginConfig struct {
	zones          []string // fully qualified, lower case
	writer         bool     // endpointslices is not off
	serviceImports bool
	namespaces     []string // watched (and written) namespaces; none is all
	linksNamespace string   // links_namespace: where Links count
	leaseNamespace string   // "" is the pod's
	leaseName      string
	leaseDuration  time.Duration
	localities     map[string]map[string]string // cluster -> locality key -> value
	topology       []string                     // the locality keys that decide tiers
}

// directive is one use of a directive: its arguments, and the lines of its block, tokens each.
type directive struct {
	args  []string
	block [][]string
}

// directives returns each use of directive name in server block sb.
func directives(sb caddyfile.ServerBlock, name string) []directive {
	var out []directive
	depth, line := 0, -1
	for _, t := range sb.Tokens[name] {
		switch {
		case depth == 0 && t.Text == name && t.Line != line:
			out = append(out, directive{})
			line = t.Line
		case t.Text == "{":
			depth++
		case t.Text == "}":
			depth--
		case depth == 0:
			out[len(out)-1].args = append(out[len(out)-1].args, t.Text)
		case t.Line != line:
			d := &out[len(out)-1]
			d.block = append(d.block, []string{t.Text})
			line = t.Line
		default:
			d := &out[len(out)-1]
			d.block[len(d.block)-1] = append(d.block[len(d.block)-1], t.Text)
		}
	}
	return out
}

// parseCorefile parses text with CoreDNS's parser.
func parseCorefile(name, text string) ([]caddyfile.ServerBlock, error) {
	return caddyfile.Parse(name, strings.NewReader(text), nil)
}

// keyZone is the zone of a server block key (global:5353, dns://global., .:53), fully qualified.
func keyZone(key string) string {
	key = strings.ToLower(key)
	if i := strings.Index(key, "://"); i >= 0 {
		key = key[i+3:]
	}
	if host, _, err := net.SplitHostPort(key); err == nil {
		key = host
	} else if i := strings.LastIndex(key, ":"); i >= 0 && !strings.Contains(key, "]") {
		key = key[:i]
	}
	return dns.Fqdn(key)
}

// globalConfig reads the global plugin's options from the Corefile in text.
func globalConfig(name, text string) (*pluginConfig, error) {
	blocks, err := parseCorefile(name, text)
	if err != nil {
		return nil, err
	}
	for _, sb := range blocks {
		ds := directives(sb, "global")
		if len(ds) == 0 {
			continue
		}
		c := &pluginConfig{writer: true, leaseName: defaultLeaseName, leaseDuration: defaultLeaseDuration, linksNamespace: defaultLinksNamespace,
			localities: map[string]map[string]string{}, topology: []string{zoneKey, regionKey}}
		c.zones = zonesOf(ds[0].args, sb.Keys)
		for _, line := range ds[0].block {
			if err := c.option(line[0], line[1:]); err != nil {
				return nil, fmt.Errorf("%s: global: %s: %w", name, line[0], err)
			}
		}
		return c, nil
	}
	return nil, fmt.Errorf("%s has no global plugin", name)
}

// zonesOf is the plugin's zones: its arguments, else its server block's (the root's being global.).
func zonesOf(args, keys []string) []string {
	var zones []string
	if len(args) == 0 {
		args = keys
	}
	for _, a := range args {
		z := keyZone(a)
		if z == "." {
			z = "global."
		}
		if !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	return zones
}

// option records the options the checks need; the others are the plugin's business.
func (c *pluginConfig) option(opt string, args []string) error {
	switch opt {
	case "endpointslices":
		c.writer = len(args) != 1 || args[0] != "off"
	case "serviceimports":
		c.serviceImports = len(args) == 1 && args[0] == "on"
	case "namespaces":
		c.namespaces = args
	case "links_namespace":
		if len(args) == 1 {
			c.linksNamespace = args[0]
		}
	case "lease":
		if len(args) != 2 {
			return fmt.Errorf("want NAMESPACE NAME, have %q", args)
		}
		c.leaseNamespace, c.leaseName = args[0], args[1]
	case "lease_duration":
		d, err := time.ParseDuration(strings.Join(args, ""))
		if err != nil {
			return err
		}
		c.leaseDuration = d
	case "locality":
		if len(args) < 2 {
			return fmt.Errorf("want CLUSTER KEY=VALUE..., have %q", args)
		}
		kv := map[string]string{}
		for _, a := range args[1:] {
			k, v, _ := strings.Cut(a, "=")
			kv[localityKey(k)] = v
		}
		c.localities[strings.ToLower(args[0])] = kv
	case "topology":
		c.topology = nil
		for _, a := range args {
			c.topology = append(c.topology, localityKey(a))
		}
	}
	return nil
}

// localityKey expands the short forms zone and region, as the plugin does.
func localityKey(k string) string {
	switch k {
	case "zone":
		return zoneKey
	case "region":
		return regionKey
	}
	return k
}
