package oracle

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Check compares reply m, as the server sends it (truncated to q's limit), with e, what q must be
// answered: its rcode, records, their owner name (the question's, its case kept) and TTL; A and
// AAAA records in tier order, each tier in the README's order rotated (rotate) or not; over UDP, a
// reply too big keeps the nearest records that fit and sets TC (Big answers); SRV records of one
// priority share one weight; negative answers carry the zone's SOA.
func (w *World) Check(q Question, e Expected, m *dns.Msg) error {
	if m.Rcode != e.Rcode {
		return fmt.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[e.Rcode])
	}
	if e.EDE != "" && q.Size > 0 {
		return checkAmplification(q, e, m)
	}
	if got := ede(m); got != e.EDE {
		return fmt.Errorf("extended error %q, want %q", got, e.EDE)
	}
	for _, rr := range m.Answer {
		h := rr.Header()
		if h.Name != q.Name() || h.Ttl != w.TTL || h.Class != dns.ClassINET || h.Rrtype != e.Type {
			return fmt.Errorf("record %q: want owner %s, TTL %d, type %s", rr, q.Name(), w.TTL, dns.TypeToString[e.Type])
		}
	}
	if len(e.Tiers) == 0 {
		if len(m.Answer) > 0 || m.Truncated {
			return fmt.Errorf("%d records (TC %t), want none", len(m.Answer), m.Truncated)
		}
		if len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA || m.Ns[0].Header().Name != e.SOA {
			return fmt.Errorf("authority %v, want the SOA of %s", m.Ns, e.SOA)
		}
		return nil
	}
	if e.Type == dns.TypeSRV {
		return w.checkSRV(e, m)
	}
	return w.checkAddresses(q, e, m)
}

// checkAmplification checks a reply over UDP with an Extended DNS Error: at most three times the
// query, and when that cut it (TC), without records; its EDE, when kept, e's.
func checkAmplification(q Question, e Expected, m *dns.Msg) error {
	if most := 3 * q.Msg().Len(); m.Len() > most {
		return fmt.Errorf("%d bytes over UDP with an extended error, more than 3 times the query's %d", m.Len(), most/3)
	}
	if got := ede(m); got != e.EDE && (got != "" || !m.Truncated) {
		return fmt.Errorf("extended error %q (TC %t), want %q", got, m.Truncated, e.EDE)
	}
	if m.Truncated && len(m.Answer)+len(m.Ns) > 0 {
		return fmt.Errorf("cut to fit three times the query, %d records left", len(m.Answer)+len(m.Ns))
	}
	if !m.Truncated && (len(m.Answer) > 0 || len(m.Ns) != 1 || m.Ns[0].Header().Name != e.SOA) {
		return fmt.Errorf("records %v, authority %v: want the SOA of %s alone", m.Answer, m.Ns, e.SOA)
	}
	return nil
}

// ede returns the text of m's Extended DNS Error, "" for none.
func ede(m *dns.Msg) string {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok {
				return e.ExtraText
			}
		}
	}
	return ""
}

// checkAddresses checks an A or AAAA answer: tier after tier, each its records in the README's
// order from a rotated start, until the answer ends; it ends early only with TC, when one record
// more would not have fit.
func (w *World) checkAddresses(q Question, e Expected, m *dns.Msg) error {
	var got []netip.Addr
	for _, rr := range m.Answer {
		var ip []byte
		switch rr := rr.(type) {
		case *dns.A:
			ip = rr.A
		case *dns.AAAA:
			ip = rr.AAAA
		}
		a, _ := netip.AddrFromSlice(ip)
		got = append(got, a.Unmap())
	}
	pos := 0
	for _, tier := range e.Tiers {
		if pos == len(got) {
			return truncated(q, m, got, e)
		}
		n := min(len(tier), len(got)-pos)
		seg := got[pos : pos+n]
		start := slices.IndexFunc(tier, func(r RR) bool { return r.Addr == seg[0] })
		if start < 0 || !w.Rotate && start != 0 {
			return fmt.Errorf("answer %v: %s is not where tier %v starts (rotate %t); want %s", got, seg[0], tier, w.Rotate, e.Tiers)
		}
		for i := range seg {
			if seg[i] != tier[(start+i)%len(tier)].Addr {
				return fmt.Errorf("answer %v: tier %v is not in order from %s; want %s", got, tier, seg[0], e.Tiers)
			}
		}
		if pos += n; n < len(tier) {
			return truncated(q, m, got, e)
		}
	}
	if pos < len(got) || m.Truncated {
		return fmt.Errorf("answer %v (TC %t), want %s", got, m.Truncated, e.Tiers)
	}
	return nil
}

// truncated checks that answer got, which ends before e's does, was cut to fit: TC, and one record
// more would not have fit in q's limit.
func truncated(q Question, m *dns.Msg, got []netip.Addr, e Expected) error {
	if !m.Truncated {
		return fmt.Errorf("answer %v ends early without TC; want %s", got, e.Tiers)
	}
	more := m.Copy()
	more.Compress = true
	more.Answer = append(more.Answer, dns.Copy(m.Answer[0]))
	if n := more.Len(); n <= q.Limit() {
		return fmt.Errorf("answer of %d records cut with TC, but %d bytes would fit one more in %d", len(got), n, q.Limit())
	}
	return nil
}

// checkSRV checks an SRV answer: its records are e's, nearest priority first, those of one
// priority in any order and of one weight; with TC, a prefix of e's tiers; without, all of them,
// each target's addresses as glue.
func (w *World) checkSRV(e Expected, m *dns.Msg) error {
	want := map[RR]bool{}
	for _, tier := range e.Tiers {
		for _, r := range tier {
			want[r] = true
		}
	}
	seen := map[RR]bool{}
	weights := map[uint16]uint16{}
	last := -1
	for _, rr := range m.Answer {
		s := rr.(*dns.SRV)
		r := RR{Priority: int(s.Priority), Port: int32(s.Port), Target: s.Target}
		if !want[r] || seen[r] || r.Priority < last {
			return fmt.Errorf("SRV %s: unexpected, again or out of order; want %v", r, e.Tiers)
		}
		if wt, ok := weights[s.Priority]; ok && wt != s.Weight {
			return fmt.Errorf("SRV %s: weight %d, another of its priority has %d", r, s.Weight, wt)
		}
		seen[r], weights[s.Priority], last = true, s.Weight, r.Priority
	}
	for r := range want {
		if !seen[r] && (!m.Truncated || r.Priority < last) {
			return fmt.Errorf("SRV %s missing (TC %t); want %v", r, m.Truncated, e.Tiers)
		}
	}
	if m.Truncated {
		return nil
	}
	glue := map[string][]netip.Addr{}
	for _, rr := range m.Extra {
		var a netip.Addr
		switch rr := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(rr.A)
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(rr.AAAA)
		default:
			continue
		}
		glue[rr.Header().Name] = append(glue[rr.Header().Name], a.Unmap())
	}
	for target, addrs := range e.Glue {
		if !sameAddrs(glue[target], addrs) {
			return fmt.Errorf("glue of %s: %v, want %v", target, glue[target], addrs)
		}
		delete(glue, target)
	}
	if len(glue) > 0 {
		return fmt.Errorf("glue of no target: %v", glue)
	}
	return nil
}

func sameAddrs(a, b []netip.Addr) bool {
	key := func(as []netip.Addr) string {
		var s []string
		for _, a := range as {
			s = append(s, a.String())
		}
		slices.Sort(s)
		return strings.Join(s, " ")
	}
	return key(a) == key(b)
}
