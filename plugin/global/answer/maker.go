package answer

import (
	"net"
	"net/netip"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/miekg/dns"
)

// Maker makes the records of answers from what they share: the options that shape them.
type Maker struct {
	TTL     uint32       // ttl
	Rotate  bool         // rotate: addresses within each tier
	NSAddrs []netip.Addr // the addresses ns1.dns.<zone> answers with
}

func (mk *Maker) hdr(owner string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: mk.TTL}
}

// soa is zone's SOA record, in class class (CH for explanations).
func (mk *Maker) soa(zone string, snap *index.Snapshot, class uint16) *dns.SOA {
	soa := &dns.SOA{
		Hdr:     mk.hdr(zone, dns.TypeSOA),
		Ns:      nameserver(zone),
		Mbox:    "hostmaster.dns." + zone,
		Serial:  snap.Serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  mk.TTL,
	}
	soa.Hdr.Class = class
	return soa
}

func (mk *Maker) addr(owner string, a netip.Addr) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: mk.hdr(owner, dns.TypeA), A: net.IP(a.AsSlice())}
	}
	return &dns.AAAA{Hdr: mk.hdr(owner, dns.TypeAAAA), AAAA: net.IP(a.AsSlice())}
}

// glue returns the A and/or AAAA records of the addresses this server listens on.
func (mk *Maker) glue(owner string, types ...uint16) []dns.RR {
	var out []dns.RR
	for _, a := range mk.NSAddrs {
		for _, t := range types {
			if a.Is4() == (t == dns.TypeA) {
				out = append(out, mk.addr(owner, a))
			}
		}
	}
	return out
}
