// Package stanza reads a Corefile's `global` stanza, its zones and every option, once for all
// its readers: the plugin at startup, linkerd-global from an installed ConfigMap, and the tests
// from a rendered chart. The options the outside depends on are the contract's (contract.Options);
// the plugin reads its own through Own, and the other readers pass them by.
package stanza

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/plugin"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Stanza is a `global` stanza as read: its zones and the contract's options.
type Stanza struct {
	Zones []string // fully qualified, lower case
	contract.Options
}

// Own reads one of the plugin's own options, opt with its arguments args, of a stanza serving
// zones; d is at the option, for errors found later. Its errors are located by Read.
type Own func(d *caddyfile.Dispenser, zones []string, opt string, args []string) error

// repeatable are the options a stanza may give more than once, each time of another cluster
// (locality) or zone (policy); every other is given once.
var repeatable = []string{"locality", "policy"}

// Read reads the stanza whose directive d is at (d.Next() has just returned it) in a server block
// of keys: its zones, its options from contract.Defaults, each checked as read, then the rules
// across them (contract.Options.Check). own reads the options the contract does not name; nil
// passes them by. Errors are CoreDNS's, with the file and line (caddyfile's Err and ArgErr).
func Read(d *caddyfile.Dispenser, keys []string, own Own) (Stanza, error) {
	zones, err := Zones(d.RemainingArgs(), keys)
	if err != nil {
		return Stanza{}, d.Err(err.Error())
	}
	s := Stanza{Zones: zones, Options: contract.Defaults()}
	seen := map[string]bool{}
	for d.NextBlock() {
		opt, args := d.Val(), d.RemainingArgs()
		if seen[opt] && !slices.Contains(repeatable, opt) {
			return s, d.Errf("%s given twice", opt)
		}
		seen[opt] = true
		known, err := s.Set(opt, args)
		if !known && own != nil {
			err = own(d, zones, opt, args)
		}
		if err != nil {
			return s, at(d, err)
		}
	}
	if err := s.Check(); err != nil {
		return s, d.Err(err.Error())
	}
	return s, nil
}

// at is err, of the option d is at, located as CoreDNS locates its errors.
func at(d *caddyfile.Dispenser, err error) error {
	if errors.Is(err, contract.ErrArgCount) {
		return d.ArgErr()
	}
	return d.Err(err.Error())
}

// Parse reads the first `global` stanza of the Corefile text, named name in errors, as the plugin
// reads it but for its own options.
func Parse(name, text string) (Stanza, error) {
	blocks, err := caddyfile.Parse(name, strings.NewReader(text), nil)
	if err != nil {
		return Stanza{}, err
	}
	for _, sb := range blocks {
		if ts := sb.Tokens[contract.Name]; len(ts) > 0 {
			d := caddyfile.NewDispenserTokens(name, ts)
			d.Next()
			return Read(&d, sb.Keys, nil)
		}
	}
	return Stanza{}, fmt.Errorf("%s has no %s plugin", name, contract.Name)
}

// DefaultZone is the zone of a stanza in the root's server block that names none.
const DefaultZone = contract.Name + "."

// Zones are a stanza's zones: its arguments, else its server block's keys, each read as CoreDNS
// reads a zone (plugin.Host: without transport and port, fully qualified, lower case), each once;
// the root's is DefaultZone, since CoreDNS gives a block only the queries below its zones and the
// plugin would never be asked another. Each must be made of DNS labels: every name answered is.
func Zones(args, keys []string) ([]string, error) {
	if len(args) > 0 {
		return ZoneArgs(args)
	}
	var zones []string
	for _, k := range keys {
		hosts := plugin.Host(k).NormalizeExact()
		if len(hosts) == 0 {
			hosts = []string{k}
		}
		for _, z := range hosts {
			if z == "." {
				z = DefaultZone
			}
			if !validZone(z) {
				return nil, fmt.Errorf("server block zone %q is not a domain name made of DNS labels: give the plugin its zones as arguments", z)
			}
			if !slices.Contains(zones, z) {
				zones = append(zones, z)
			}
		}
	}
	if len(zones) == 0 { // no server block: a test's controller
		zones = []string{DefaultZone}
	}
	return zones, nil
}

// ZoneArgs reads zone arguments, of the stanza or of an option: each a domain name.
func ZoneArgs(args []string) ([]string, error) {
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

// validZone reports whether zone (normalized, with its final dot) is below the root and made of
// DNS-1123 labels.
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
