package global

import (
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/index"
)

// kind is what a query name under one of our zones refers to.
type kind uint8

const (
	kindNone            kind = iota // nothing we could have: NXDOMAIN
	kindApex                        // <zone>
	kindNameserver                  // ns1.dns.<zone>
	kindService                     // [<host>.][<cluster>.]<svc>.<ns>.<zone>, or <svc>.<zone>
	kindSRV                         // _<port>._<proto>.<svc>.<ns>.<zone>, or _<port>._<proto>.<svc>.<zone>
	kindProto                       // _<proto>.<svc>[.<ns>].<zone>: an empty non-terminal above SRV names
	kindNamespace                   // <ns>.svc.<zone>, or svc.<zone> (ns ""): empty non-terminals (mcs)
	kindVersion                     // dns-version.<zone>: the specification's version (mcs)
	kindAboveNameserver             // dns.<zone> (mcs): the empty non-terminal above ns1.dns.<zone>
)

// scheme is how names are formed under a zone: this plugin's own (<svc>.<ns>.global), or the
// Kubernetes Multi-Cluster Services DNS specification's (<svc>.<ns>.svc.clusterset.local).
type scheme uint8

const (
	schemeGlobal scheme = iota
	schemeMCS
)

// mcsVersion is the version of the MCS DNS specification (KEP-1645, specification.md) answered.
const mcsVersion = "1.0.0"

// scheme returns the naming scheme of zone, one of g's zones.
func (g *Global) scheme(zone string) scheme {
	if slices.Contains(g.mcsZones, zone) {
		return schemeMCS
	}
	return schemeGlobal
}

// parse parses qname under zone in scheme s.
func (s scheme) parse(qname, zone string) name {
	if s == schemeMCS {
		return parseMCSName(qname, zone)
	}
	return parseName(qname, zone)
}

// serviceDomain is the name of global service k under zone, where its records' names end, in the
// pieces that join to it: callers building many names write them in place, with no join of their own.
func (s scheme) serviceDomain(k index.Key, zone string) [5]string {
	if s == schemeMCS {
		return [5]string{k.Name, ".", k.Namespace, ".svc.", zone}
	}
	return [5]string{k.Name, ".", k.Namespace, ".", zone}
}

// parseMCSName parses qname, lower case and fully qualified, under zone, as KEP-1645's DNS
// specification names headless services: <svc>.<ns>.svc, <hostname>.<clusterid>.<svc>.<ns>.svc,
// _<port>._<proto>.<svc>.<ns>.svc, dns-version. There are no short forms, and
// <clusterid>.<svc>.<ns>.svc must not exist (2.4.4): both are kindNone.
func parseMCSName(qname, zone string) name {
	if qname == zone {
		return name{kind: kindApex}
	}
	rest := strings.TrimSuffix(qname[:len(qname)-len(zone)], ".")
	switch rest {
	case nameserverLabel:
		return name{kind: kindNameserver}
	case nameserverParent:
		return name{kind: kindAboveNameserver}
	case "dns-version":
		return name{kind: kindVersion}
	case "svc":
		return name{kind: kindNamespace}
	}
	rest, ok := strings.CutSuffix(rest, ".svc")
	if !ok {
		return name{}
	}
	l, n, ok := splitLabels(rest)
	if !ok {
		return name{}
	}
	u0, u1 := underscored(l[0]), underscored(l[1])
	switch {
	case n == 1:
		return name{kind: kindNamespace, ns: l[0]}
	case n == 2:
		return name{kind: kindService, svc: l[0], ns: l[1]}
	case n == 3 && u0:
		return name{kind: kindProto, proto: l[0][1:], svc: l[1], ns: l[2]}
	case n == 4 && u0 && u1:
		return name{kind: kindSRV, port: l[0][1:], proto: l[1][1:], svc: l[2], ns: l[3]}
	case n == 4 && !u0 && !u1:
		return name{kind: kindService, host: l[0], cluster: l[1], svc: l[2], ns: l[3]}
	}
	return name{}
}

// name is a parsed query name. Labels are lower case; port and proto have no underscore.
type name struct {
	kind                   kind
	svc, ns, cluster, host string
	port, proto            string
	short                  bool // no namespace: <svc>.<zone> forms
}

// nameserverLabel is the name under each zone that the apex NS record points at; nameserverParent
// is the name above it, which therefore exists (RFC 8020).
const (
	nameserverLabel  = "ns1." + nameserverParent
	nameserverParent = "dns"
)

// parseName parses qname, lower case and fully qualified, under zone (which it ends with).
// It does not allocate: labels are sub-strings of qname.
func parseName(qname, zone string) name {
	if qname == zone {
		return name{kind: kindApex}
	}
	rest := strings.TrimSuffix(qname[:len(qname)-len(zone)], ".")
	if rest == nameserverLabel {
		return name{kind: kindNameserver}
	}
	l, n, ok := splitLabels(rest)
	if !ok {
		return name{}
	}
	u0, u1 := underscored(l[0]), underscored(l[1])
	switch {
	case n == 1:
		return name{kind: kindService, svc: l[0], short: true}
	case n == 2 && u0:
		return name{kind: kindProto, proto: l[0][1:], svc: l[1], short: true}
	case n == 2:
		return name{kind: kindService, svc: l[0], ns: l[1]}
	case n == 3 && u0 && u1:
		return name{kind: kindSRV, port: l[0][1:], proto: l[1][1:], svc: l[2], short: true}
	case n == 3 && u0:
		return name{kind: kindProto, proto: l[0][1:], svc: l[1], ns: l[2]}
	case n == 3:
		return name{kind: kindService, cluster: l[0], svc: l[1], ns: l[2]}
	case n == 4 && u0 && u1:
		return name{kind: kindSRV, port: l[0][1:], proto: l[1][1:], svc: l[2], ns: l[3]}
	case n == 4 && !u0 && !u1:
		return name{kind: kindService, host: l[0], cluster: l[1], svc: l[2], ns: l[3]}
	}
	return name{}
}

// splitLabels splits rest into its labels, without allocating; ok is false past four.
func splitLabels(rest string) (l [4]string, n int, ok bool) {
	for ; rest != ""; n++ {
		if n == len(l) {
			return l, n, false
		}
		l[n], rest, _ = strings.Cut(rest, ".")
	}
	return l, n, true
}

// underscored reports whether label is an SRV service or protocol label such as _tcp.
func underscored(label string) bool { return len(label) > 1 && label[0] == '_' }
