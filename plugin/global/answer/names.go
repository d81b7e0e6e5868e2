package answer

import (
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/miekg/dns"
)

// form is what a query name under one of our zones refers to.
type form uint8

const (
	formNone            form = iota // nothing we could have: NXDOMAIN
	formApex                        // <zone>
	formNameserver                  // ns1.dns.<zone>
	formService                     // [<host>.][<cluster>.]<svc>.<ns>.<zone>, or <svc>.<zone>
	formSRV                         // _<port>._<proto>.<svc>.<ns>.<zone>, or _<port>._<proto>.<svc>.<zone>
	formProto                       // _<proto>.<svc>[.<ns>].<zone>: an empty non-terminal above SRV names
	formNamespace                   // <ns>.svc.<zone>, or svc.<zone> (ns ""): empty non-terminals (mcs)
	formVersion                     // dns-version.<zone>: the specification's version (mcs)
	formAboveNameserver             // dns.<zone> (mcs): the empty non-terminal above ns1.dns.<zone>
)

// ofPorts reports whether f names ports of a service: an SRV name or the _<proto> above it, whose
// records are the service's records that have such a port.
func (f form) ofPorts() bool { return f == formSRV || f == formProto }

// scheme is how names are formed under a zone: this plugin's own (<svc>.<ns>.global), or the
// Kubernetes Multi-Cluster Services DNS specification's (<svc>.<ns>.svc.clusterset.local).
type scheme uint8

const (
	schemeGlobal scheme = iota
	schemeMCS
)

// mcsVersion is the version of the MCS DNS specification (KEP-1645, specification.md) answered.
const mcsVersion = "1.0.0"

// schemeOf returns the naming scheme of zone: MCS names in mcsZones, else .global's.
func schemeOf(mcsZones []string, zone string) scheme {
	if slices.Contains(mcsZones, zone) {
		return schemeMCS
	}
	return schemeGlobal
}

// parse parses qname under zone in scheme s into n: a name of the scheme, or a zonal name of one.
// (A name is some 130 bytes: made in place, not returned on the caller's stack.)
func (s scheme) parse(n *name, qname, zone string) {
	if s == schemeGlobal { // parseBase, without a call more on the common path
		*n = parseName(qname, zone)
	} else {
		s.parseBase(n, qname, zone)
	}
	// A zonal name has at least three labels more than the name it scopes: it parses as none, or
	// as one with _zone where no name of ours has an underscore. Only then is it looked for.
	if n.form != formNone && n.svc != zoneAnchor && n.ns != zoneAnchor && n.cluster != zoneAnchor && n.host != zoneAnchor {
		return
	}
	z, topoZone, base, zonal := cutZonal(qname, zone)
	if !zonal {
		return
	}
	if s.parseBase(n, base, zone); z == zonalNone || n.form != formService && !n.form.ofPorts() {
		*n = name{} // an unknown directive, or a name without records: NXDOMAIN, as CoreDNS
		return
	}
	n.zonal, n.topoZone = z, topoZone
}

// parseBase parses qname under zone in scheme s, as a name of the scheme, into n.
func (s scheme) parseBase(n *name, qname, zone string) {
	if s == schemeMCS {
		*n = parseMCSName(qname, zone)
		return
	}
	*n = parseName(qname, zone)
}

// zonal is the directive of a zonal name, <topology-zone>.pin|prefer._zone.<name>, as CoreDNS's
// kubernetes plugin defines them (its README, "Zonal Names"): pin answers only the records in the
// topology zone (NODATA when none), prefer those, or all of them when none.
type zonal uint8

const (
	zonalNone zonal = iota
	zonalPin
	zonalPrefer
)

// zoneAnchor anchors a zonal name, as CoreDNS's: no name of a scheme has it left of its service.
const (
	zoneAnchor = "_zone"
	zoneLabel  = "." + zoneAnchor + "."
)

// cutZonal splits a zonal name into its directive, topology zone (every label left of the
// directive: zone values may contain dots) and the name it scopes; ok is false when qname has no
// zone label, z zonalNone when the directive is unknown. It does not allocate.
func cutZonal(qname, zone string) (z zonal, topoZone, base string, ok bool) {
	i := strings.Index(qname, zoneLabel)
	if i < 0 || len(qname)-(i+len(zoneLabel)) <= len(zone) {
		return zonalNone, "", "", false
	}
	prefix, base := qname[:i], qname[i+len(zoneLabel):]
	j := strings.LastIndexByte(prefix, '.')
	if j <= 0 {
		return zonalNone, "", base, true
	}
	switch prefix[j+1:] {
	case "pin":
		z = zonalPin
	case "prefer":
		z = zonalPrefer
	}
	return z, prefix[:j], base, true
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
// <clusterid>.<svc>.<ns>.svc must not exist (2.4.4): both are formNone.
func parseMCSName(qname, zone string) name {
	if qname == zone {
		return name{form: formApex}
	}
	rest := strings.TrimSuffix(qname[:len(qname)-len(zone)], ".")
	switch rest {
	case nameserverLabel:
		return name{form: formNameserver}
	case nameserverParent:
		return name{form: formAboveNameserver}
	case "dns-version":
		return name{form: formVersion}
	case "svc":
		return name{form: formNamespace}
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
		return name{form: formNamespace, ns: l[0]}
	case n == 2:
		return name{form: formService, svc: l[0], ns: l[1]}
	case n == 3 && u0:
		return name{form: formProto, ports: index.PortQuery{Protocol: protocol(l[0])}, svc: l[1], ns: l[2]}
	case n == 4 && u0 && u1:
		return name{form: formSRV, ports: index.PortQuery{Name: l[0][1:], Protocol: protocol(l[1])}, svc: l[2], ns: l[3]}
	case n == 4 && !u0 && !u1:
		return name{form: formService, host: l[0], cluster: l[1], svc: l[2], ns: l[3]}
	}
	return name{}
}

// name is a parsed query name. Labels are lower case; the ports an SRV name asks for have no
// underscore, and their protocol is spelled as Kubernetes does (protocol).
type name struct {
	form                   form
	svc, ns, cluster, host string
	ports                  index.PortQuery // _<port>._<proto>, _<proto>: "" any
	short                  bool            // no namespace: <svc>.<zone> forms
	zonal                  zonal           // a zonal name's directive: the records of topology zone topoZone
	topoZone               string          // a zonal name's topology zone
}

// scopes reports whether record r is in the scope n names: its pod's, its cluster's, or the whole
// service's.
func (n *name) scopes(r *index.Record) bool {
	return (n.cluster == "" || r.Cluster == n.cluster) && (n.host == "" || r.Host == n.host)
}

// matches reports whether record r has a port n asks for: any record for names without a port
// label, else one with a port of n's name (any, for _<proto> names) and protocol.
func (n *name) matches(r *index.Record) bool {
	if !n.form.ofPorts() {
		return true
	}
	for i := range r.Ports {
		if n.ports.Matches(r.Ports[i]) {
			return true
		}
	}
	return false
}

// service is the <ns>/<svc> n asks for, or the bare name of a short one.
func (n *name) service() string {
	if n.short {
		return n.svc + " in any namespace"
	}
	return n.ns + "/" + n.svc
}

// protocol is the protocol of an _<proto> label as Kubernetes spells it (TCP, UDP, SCTP, the values
// it admits), so that ports compare to it without folding case; any other label as it is, the
// protocol of no port.
func protocol(label string) string {
	switch p := label[1:]; p {
	case "tcp":
		return "TCP"
	case "udp":
		return "UDP"
	case "sctp":
		return "SCTP"
	default:
		return p
	}
}

// nameserverLabel is the name under each zone that the apex NS record points at; nameserverParent
// is the name above it, which therefore exists (RFC 8020).
const (
	nameserverLabel  = "ns1." + nameserverParent
	nameserverParent = "dns"
)

// nameserver is the name of zone's nameserver, which its NS record points at.
func nameserver(zone string) string { return nameserverLabel + "." + zone }

// QuestionName is the question's name as it came (unpacked names are in presentation form
// already): what request.Request's QName computes, without formatting it again for every use.
func QuestionName(r *dns.Msg) string {
	if len(r.Question) == 0 {
		return "."
	}
	return r.Question[0].Name
}

// LowerName returns name in lower case. Nearly every question's name is lower case ASCII already:
// that is checked 8 bytes at a time, the last 8 read again for a tail, and name returned as it
// is: about 60 instructions for a name of 14 bytes, where strings.ToLower's check of one byte at
// a time, which every query paid, took 200.
func LowerName(name string) string {
	n := len(name)
	if n < 8 {
		for i := range n {
			if c := name[i]; c >= 0x80 || 'A' <= c && c <= 'Z' {
				return strings.ToLower(name)
			}
		}
		return name
	}
	for i := 0; i < n; i += 8 {
		if !lowerASCII(name[min(i, n-8):]) {
			return strings.ToLower(name)
		}
	}
	return name
}

// lowerASCII reports whether the first 8 bytes of w are ASCII and none upper case.
func lowerASCII(w string) bool {
	_ = w[7] // one bounds check, and the compiler makes the bytes one load
	v := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
	// In each byte below 0x80, adding 0x3f sets the top bit from 'A' on, adding 0x25 from past 'Z'
	// on; neither carries into the next byte.
	return v&highBits == 0 && (v+0x3f*lowBits)&^(v+0x25*lowBits)&highBits == 0
}

const (
	lowBits  = 0x0101010101010101 // the lowest bit of each byte of a uint64
	highBits = 0x8080808080808080 // the highest
)

// parseName parses qname, lower case and fully qualified, under zone (which it ends with).
// It does not allocate: labels are sub-strings of qname.
func parseName(qname, zone string) name {
	if qname == zone {
		return name{form: formApex}
	}
	rest := strings.TrimSuffix(qname[:len(qname)-len(zone)], ".")
	if rest == nameserverLabel {
		return name{form: formNameserver}
	}
	l, n, ok := splitLabels(rest)
	if !ok {
		return name{}
	}
	u0, u1 := underscored(l[0]), underscored(l[1])
	switch {
	case n == 1:
		return name{form: formService, svc: l[0], short: true}
	case n == 2 && u0:
		return name{form: formProto, ports: index.PortQuery{Protocol: protocol(l[0])}, svc: l[1], short: true}
	case n == 2:
		return name{form: formService, svc: l[0], ns: l[1]}
	case n == 3 && u0 && u1:
		return name{form: formSRV, ports: index.PortQuery{Name: l[0][1:], Protocol: protocol(l[1])}, svc: l[2], short: true}
	case n == 3 && u0:
		return name{form: formProto, ports: index.PortQuery{Protocol: protocol(l[0])}, svc: l[1], ns: l[2]}
	case n == 3:
		return name{form: formService, cluster: l[0], svc: l[1], ns: l[2]}
	case n == 4 && u0 && u1:
		return name{form: formSRV, ports: index.PortQuery{Name: l[0][1:], Protocol: protocol(l[1])}, svc: l[2], ns: l[3]}
	case n == 4 && !u0 && !u1:
		return name{form: formService, host: l[0], cluster: l[1], svc: l[2], ns: l[3]}
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
