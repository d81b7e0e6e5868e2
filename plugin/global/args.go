package global

import (
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/coredns/caddy"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The kinds of argument options take, parsed and checked alike for every option.

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

// intArg parses an option's one argument, an integer in [lo, hi] (hi math.MaxInt: no bound).
func intArg[T ~int | ~uint32](c *caddy.Controller, opt string, args []string, lo, hi int) (T, error) {
	if len(args) != 1 {
		return 0, c.ArgErr()
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < lo || n > hi {
		if hi == math.MaxInt {
			return 0, c.Errf("%s must be an integer >= %d, not %q", opt, lo, args[0])
		}
		return 0, c.Errf("%s must be an integer in [%d, %d], not %q", opt, lo, hi, args[0])
	}
	return T(n), nil
}

// durationArg parses an option's one argument, a duration >= 0, or > 0 when positive.
func durationArg(c *caddy.Controller, opt string, args []string, positive bool) (time.Duration, error) {
	if len(args) != 1 {
		return 0, c.ArgErr()
	}
	d, err := time.ParseDuration(args[0])
	switch {
	case positive && (err != nil || d <= 0):
		return 0, c.Errf("%s must be a positive duration, not %q", opt, args[0])
	case err != nil || d < 0:
		return 0, c.Errf("%s must be a duration >= 0, not %q", opt, args[0])
	}
	return d, nil
}

// firstOf is the first of args, "" when there is none.
func firstOf(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// networksArg parses a list of networks: address prefixes (10.0.0.0/8, fd00::/8) or addresses.
func networksArg(c *caddy.Controller, opt string, args []string) (networks, error) {
	if len(args) == 0 {
		return nil, c.ArgErr()
	}
	ns := make(networks, 0, len(args))
	for _, a := range args {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			addr, aerr := netip.ParseAddr(a)
			if aerr != nil || addr.Zone() != "" {
				return nil, c.Errf("%s: %q is not a network (an address or a prefix such as 10.0.0.0/8)", opt, a)
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		if p != p.Masked() {
			return nil, c.Errf("%s: %q has bits set past its length: %s", opt, a, p.Masked())
		}
		if slices.Contains(ns, p) {
			return nil, c.Errf("%s lists %q twice", opt, a)
		}
		ns = append(ns, p)
	}
	return ns, nil
}

// parseECSFrom parses `client_ecs_from SOURCE...`: networks, and Services (NAMESPACE/SERVICE, told
// apart by having neither a dot nor a colon), whose pods' addresses are watched.
func (g *Global) parseECSFrom(c *caddy.Controller, opt string, args []string) (err error) {
	if len(args) == 0 {
		return c.ArgErr()
	}
	var nets, svcs []string
	for _, a := range args {
		if strings.Contains(a, "/") && !strings.ContainsAny(a, ".:") {
			svcs = append(svcs, a)
		} else {
			nets = append(nets, a)
		}
	}
	if len(nets) > 0 {
		if g.ecsFrom, err = networksArg(c, opt, nets); err != nil {
			return err
		}
	}
	if len(svcs) > 0 {
		g.ecsServices, err = servicesArg(c, opt, svcs)
	}
	return err
}

// nameArg parses an option's one argument, a namespace name.
func nameArg(c *caddy.Controller, opt string, args []string) (string, error) {
	if len(args) != 1 {
		return "", c.ArgErr()
	}
	return args[0], dnsLabel(c, opt, args[0])
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

// localityKey expands the short forms zone and region and checks the key is a label key.
func localityKey(c *caddy.Controller, k string) (string, error) {
	if x := contract.LocalityKey(k); x != k {
		return x, nil
	}
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return "", c.Errf("%q is not a label key: %s", k, strings.Join(errs, "; "))
	}
	return k, nil
}

// servicesArg parses a list of Services, NAMESPACE/SERVICE (client_forwarders, client_ecs_from).
func servicesArg(c *caddy.Controller, opt string, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, c.ArgErr()
	}
	for i, a := range args {
		ns, name, ok := strings.Cut(a, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
			return nil, c.Errf("%s: %q is not a Service's <namespace>/<name>", opt, a)
		}
		if slices.Contains(args[:i], a) {
			return nil, c.Errf("%s lists %q twice", opt, a)
		}
	}
	return args, nil
}
