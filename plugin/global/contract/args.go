package contract

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The kinds of argument the options of a `global` block take, read and checked alike for every
// option, the plugin's own ones included. Their errors say what is wrong but not where: the
// plugin adds the Corefile's file and line (CoreDNS's "Error during parsing"), the CLI the option.

// ErrArgCount is the error of an option given too few or too many arguments; the plugin reports it
// as every CoreDNS plugin does (caddy's ArgErr).
var ErrArgCount = errors.New("wrong argument count")

// OnOff reads an option that takes on (also no argument) or off.
func OnOff(opt string, args []string) (bool, error) {
	switch {
	case len(args) == 0, len(args) == 1 && args[0] == "on":
		return true, nil
	case len(args) == 1 && args[0] == "off":
		return false, nil
	}
	return false, fmt.Errorf("%s takes on or off, not %q", opt, strings.Join(args, " "))
}

// Int reads an option's one argument, an integer in [lo, hi] (hi math.MaxInt: no bound).
func Int[T ~int | ~uint32](opt string, args []string, lo, hi int) (T, error) {
	if len(args) != 1 {
		return 0, ErrArgCount
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < lo || n > hi {
		if hi == math.MaxInt {
			return 0, fmt.Errorf("%s must be an integer >= %d, not %q", opt, lo, args[0])
		}
		return 0, fmt.Errorf("%s must be an integer in [%d, %d], not %q", opt, lo, hi, args[0])
	}
	return T(n), nil
}

// Duration reads an option's one argument, a duration >= 0, or > 0 when positive.
func Duration(opt string, args []string, positive bool) (time.Duration, error) {
	if len(args) != 1 {
		return 0, ErrArgCount
	}
	d, err := time.ParseDuration(args[0])
	switch {
	case positive && (err != nil || d <= 0):
		return 0, fmt.Errorf("%s must be a positive duration, not %q", opt, args[0])
	case err != nil || d < 0:
		return 0, fmt.Errorf("%s must be a duration >= 0, not %q", opt, args[0])
	}
	return d, nil
}

// Label checks that s, the what of an option, is a DNS label (a namespace's or a cluster's name).
func Label(what, s string) error {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return fmt.Errorf("%s %q is not a DNS label: %s", what, s, strings.Join(errs, "; "))
	}
	return nil
}

// Namespace reads an option's one argument, a namespace name.
func Namespace(opt string, args []string) (string, error) {
	if len(args) != 1 {
		return "", ErrArgCount
	}
	return args[0], Label(opt, args[0])
}

// Namespaces reads a list of namespace names, each once.
func Namespaces(opt string, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, ErrArgCount
	}
	for i, a := range args {
		if err := Label(opt+" entry", a); err != nil {
			return nil, err
		}
		if slices.Contains(args[:i], a) {
			return nil, fmt.Errorf("%s lists %q twice", opt, a)
		}
	}
	return args, nil
}

// Networks reads a list of networks: address prefixes (10.0.0.0/8, fd00::/8) or addresses, each
// once.
func Networks(opt string, args []string) ([]netip.Prefix, error) {
	if len(args) == 0 {
		return nil, ErrArgCount
	}
	ns := make([]netip.Prefix, 0, len(args))
	for _, a := range args {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			addr, aerr := netip.ParseAddr(a)
			if aerr != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("%s: %q is not a network (an address or a prefix such as 10.0.0.0/8)", opt, a)
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%s: %q has bits set past its length: %s", opt, a, p.Masked())
		}
		if slices.Contains(ns, p) {
			return nil, fmt.Errorf("%s lists %q twice", opt, a)
		}
		ns = append(ns, p)
	}
	return ns, nil
}

// Services reads a list of Services, NAMESPACE/SERVICE, each once.
func Services(opt string, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, ErrArgCount
	}
	for i, a := range args {
		ns, name, ok := strings.Cut(a, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
			return nil, fmt.Errorf("%s: %q is not a Service's <namespace>/<name>", opt, a)
		}
		if slices.Contains(args[:i], a) {
			return nil, fmt.Errorf("%s lists %q twice", opt, a)
		}
	}
	return args, nil
}

// LabelKey reads a locality key: the short forms zone and region expanded (LocalityKey), any other
// a label key.
func LabelKey(k string) (string, error) {
	if x := LocalityKey(k); x != k {
		return x, nil
	}
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return "", fmt.Errorf("%q is not a label key: %s", k, strings.Join(errs, "; "))
	}
	return k, nil
}
