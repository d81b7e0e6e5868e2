package oracle

import (
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// Form is a form of name of the README's Names table.
type Form uint8

// The forms of names asked.
const (
	FormService   Form = iota // [<host>.][<cluster>.]<svc>[.<ns>].<zone>
	FormSRV                   // _<port>._<proto>.<svc>[.<ns>].<zone>
	FormProto                 // _<proto>.<svc>[.<ns>].<zone>
	FormNamespace             // <ns>.<zone>
)

// Question is a query: its name's parts, type, and how and from where it is sent.
type Question struct {
	Form                   Form
	Svc, NS, Cluster, Host string // NS "": a short name
	Port, Proto            string // SRV and _<proto> names: a port name, tcp/udp/sctp
	Zonal                  string // "", "pin" or "prefer"
	TopoZone               string // a zonal name's topology zone
	Zone                   string // the plugin's zone asked in
	Type                   uint16

	Size int        // the EDNS0 buffer over UDP; 0: over TCP
	From netip.Addr // the source address
	ECS  netip.Prefix
	Case uint64 // a seed of the name's mixed case; 0: lower case
}

// Name returns the question's name, in its mixed case.
func (q Question) Name() string {
	var labels []string
	if q.Zonal != "" {
		labels = append(labels, q.TopoZone, q.Zonal, "_zone")
	}
	switch q.Form {
	case FormSRV:
		labels = append(labels, "_"+q.Port, "_"+q.Proto, q.Svc)
	case FormProto:
		labels = append(labels, "_"+q.Proto, q.Svc)
	case FormService:
		for _, l := range []string{q.Host, q.Cluster, q.Svc} {
			if l != "" {
				labels = append(labels, l)
			}
		}
	}
	if q.NS != "" {
		labels = append(labels, q.NS)
	}
	name := strings.Join(append(labels, q.Zone), ".")
	if q.Case == 0 {
		return name
	}
	rng := rand.New(rand.NewPCG(q.Case, 1))
	b := []byte(name)
	for i, c := range b {
		if 'a' <= c && c <= 'z' && rng.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// Msg returns the query as a client sends it.
func (q Question) Msg() *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(q.Name(), q.Type)
	size := q.Size
	if size == 0 {
		size = dns.MaxMsgSize
	}
	m.SetEdns0(uint16(min(size, dns.MaxMsgSize)), false)
	if q.ECS.IsValid() {
		family := uint16(1)
		if q.ECS.Addr().Is6() {
			family = 2
		}
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: family,
			SourceNetmask: uint8(q.ECS.Bits()), Address: q.ECS.Addr().AsSlice()})
	}
	return m
}

// Limit is the most bytes the reply may take: the client's buffer over UDP, 64 KiB over TCP.
func (q Question) Limit() int {
	if q.Size == 0 {
		return dns.MaxMsgSize
	}
	return q.Size
}

// base is the name a zonal name scopes.
func (q Question) base() Question {
	q.Zonal, q.TopoZone = "", ""
	return q
}

func (q Question) String() string {
	s := dns.TypeToString[q.Type] + " " + q.Name()
	if q.Size == 0 {
		s += " over TCP"
	} else {
		s += " over UDP/" + strconv.Itoa(q.Size)
	}
	if q.From.IsValid() {
		s += " from " + q.From.String()
	}
	if q.ECS.IsValid() {
		s += " ecs " + q.ECS.String()
	}
	return s
}
