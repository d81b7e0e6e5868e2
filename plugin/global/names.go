package global

import "strings"

// kind is what a query name under one of our zones refers to.
type kind uint8

const (
	kindNone       kind = iota // nothing we could have: NXDOMAIN
	kindApex                   // <zone>
	kindNameserver             // ns1.dns.<zone>
	kindService                // [<host>.][<cluster>.]<svc>.<ns>.<zone>, or <svc>.<zone>
	kindSRV                    // _<port>._<proto>.<svc>.<ns>.<zone>, or _<port>._<proto>.<svc>.<zone>
	kindProto                  // _<proto>.<svc>[.<ns>].<zone>: an empty non-terminal above SRV names
)

// name is a parsed query name. Labels are lower case; port and proto have no underscore.
type name struct {
	kind                   kind
	svc, ns, cluster, host string
	port, proto            string
	short                  bool // no namespace: <svc>.<zone> forms
}

// nameserverLabel is the name under each zone that the apex NS record points at.
const nameserverLabel = "ns1.dns"

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
	var l [4]string
	n := 0
	for ; rest != ""; n++ {
		if n == len(l) {
			return name{}
		}
		l[n], rest, _ = strings.Cut(rest, ".")
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

// underscored reports whether label is an SRV service or protocol label such as _tcp.
func underscored(label string) bool { return len(label) > 1 && label[0] == '_' }
