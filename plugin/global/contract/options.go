package contract

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Options are the options of a Corefile's `global` block that the outside depends on: what the
// plugin reads and writes through the API (and so the access it needs), its Lease, and its
// topology. The plugin's other options are its own business.
type Options struct {
	Writer         bool     // endpointslices is not off
	ServiceImports bool     // serviceimports on
	Namespaces     []string // namespaces: watched (and written); none is all
	LinksNamespace string   // links_namespace: where Links count
	LeaseNamespace string   // lease: "" is the pod's
	LeaseName      string
	LeaseDuration  time.Duration
	Localities     map[string]map[string]string // locality: cluster -> locality key -> value
	Topology       []string                     // topology: the locality keys of the cluster's tiers
	ClientLocality []string                     // client_locality: ecs, node, pod
	Forwarders     []string                     // client_forwarders: NAMESPACE/SERVICE
	ECSFrom        []string                     // client_ecs_from: networks and NAMESPACE/SERVICE
	Owner          [2]string                    // owner: RESOURCE (<resource>.<group>) and NAME; none: ""
}

// Defaults are the options of a `global` block that sets none.
func Defaults() Options {
	return Options{Writer: true, LinksNamespace: DefaultLinksNamespace, LeaseName: DefaultLeaseName, LeaseDuration: DefaultLeaseDuration,
		Localities: map[string]map[string]string{}, Topology: DefaultTopology(), Forwarders: DefaultForwarders()}
}

// Token is one token of a Corefile, its text and its line: caddyfile.Token's, without depending on
// it.
type Token struct {
	Text string
	Line int
}

// Directive is one use of a directive in a server block: its arguments, and the lines of its
// block, tokens each (Read reads those of a `global`).
type Directive struct {
	Args  []string
	Block [][]string
}

// Directives splits the tokens of a server block's uses of directive name (caddyfile's
// ServerBlock.Tokens[name]) into each use.
func Directives(name string, ts []Token) []Directive {
	var out []Directive
	depth, line := 0, -1
	for _, t := range ts {
		switch {
		case depth == 0 && t.Text == name && t.Line != line:
			out = append(out, Directive{})
			line = t.Line
		case t.Text == "{":
			depth++
		case t.Text == "}":
			depth--
		case depth == 0:
			out[len(out)-1].Args = append(out[len(out)-1].Args, t.Text)
		case t.Line != line:
			d := &out[len(out)-1]
			d.Block = append(d.Block, []string{t.Text})
			line = t.Line
		default:
			d := &out[len(out)-1]
			d.Block[len(d.Block)-1] = append(d.Block[len(d.Block)-1], t.Text)
		}
	}
	return out
}

// Read reads a `global` block's option lines (each the option's name, then its arguments) from
// the defaults. The plugin checks each option fully at startup; this reads what a started plugin
// was given, and fails only on what it cannot read.
func Read(lines [][]string) (Options, error) {
	o := Defaults()
	for _, l := range lines {
		if len(l) == 0 {
			continue
		}
		if err := o.set(l[0], l[1:]); err != nil {
			return o, fmt.Errorf("%s: %w", l[0], err)
		}
	}
	return o, nil
}

// set reads one option.
func (o *Options) set(opt string, args []string) error {
	switch opt {
	case "endpointslices":
		o.Writer = len(args) != 1 || args[0] != "off"
	case "serviceimports":
		o.ServiceImports = len(args) == 1 && args[0] == "on"
	case "namespaces":
		o.Namespaces = args
	case "links_namespace":
		if len(args) != 1 {
			return fmt.Errorf("want NAMESPACE, have %q", args)
		}
		o.LinksNamespace = args[0]
	case "lease":
		if len(args) != 2 {
			return fmt.Errorf("want NAMESPACE NAME, have %q", args)
		}
		o.LeaseNamespace, o.LeaseName = args[0], args[1]
	case "lease_duration":
		d, err := time.ParseDuration(strings.Join(args, ""))
		if err != nil {
			return err
		}
		o.LeaseDuration = d
	case "locality":
		if len(args) < 2 {
			return fmt.Errorf("want CLUSTER KEY=VALUE..., have %q", args)
		}
		kv := map[string]string{}
		for _, a := range args[1:] {
			k, v, _ := strings.Cut(a, "=")
			kv[LocalityKey(k)] = v
		}
		o.Localities[args[0]] = kv
	case "topology":
		o.Topology = nil
		for _, a := range args {
			if k, locality := TopologyKey(a); locality {
				o.Topology = append(o.Topology, k)
			}
		}
	case "client_locality":
		o.ClientLocality = args
	case "client_forwarders":
		o.Forwarders = args
	case "client_ecs_from":
		o.ECSFrom = args
	case "owner":
		if len(args) != 2 {
			return fmt.Errorf("want RESOURCE NAME, have %q", args)
		}
		o.Owner = [2]string{args[0], args[1]}
	}
	return nil
}

// Watches reports whether the plugin watches namespace ns.
func (o *Options) Watches(ns string) bool {
	return len(o.Namespaces) == 0 || slices.Contains(o.Namespaces, ns)
}

// ClientSource reports whether client_locality has source (ecs, node, pod).
func (o *Options) ClientSource(source string) bool { return slices.Contains(o.ClientLocality, source) }
