package main

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/coredns/caddy/caddyfile"
	"github.com/miekg/dns"
)

// pluginConfig is what the checks need of the global plugin's Corefile: its zones, and the options
// the contract names (contract.Options).
type pluginConfig struct {
	contract.Options
	zones []string // fully qualified, lower case
}

// directives returns each use of directive name in server block sb.
func directives(sb caddyfile.ServerBlock, name string) []contract.Directive {
	ts := make([]contract.Token, len(sb.Tokens[name]))
	for i, t := range sb.Tokens[name] {
		ts[i] = contract.Token{Text: t.Text, Line: t.Line}
	}
	return contract.Directives(name, ts)
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
		o, err := contract.Read(ds[0].Block)
		if err != nil {
			return nil, fmt.Errorf("%s: global: %w", name, err)
		}
		c := &pluginConfig{Options: o, zones: zonesOf(ds[0].Args, sb.Keys)}
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
			z = contract.Name + "." // as the plugin reads the root (defaultZone)
		}
		if !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	return zones
}
