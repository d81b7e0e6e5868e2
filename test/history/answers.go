package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
)

// checkAnswers compares a replica's answers with the oracle's: every global service's (want), and
// NXDOMAIN for the names of services gone (once in want, now not).
func checkAnswers(c *harness.CoreDNS, proto string, want map[string]*service, gone []string) error {
	for _, key := range slices.Sorted(maps.Keys(want)) {
		if err := checkService(c, proto, want[key]); err != nil {
			return err
		}
	}
	for _, name := range gone {
		if s := want[name]; s == nil {
			ns, svc, _ := strings.Cut(name, "/")
			if err := expectRcode(c, proto, svc+"."+ns+".global.", dns.RcodeNameError); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkService compares a replica's answers for s with the oracle's: A, AAAA and SRV of the
// service, of each cluster's name and of each pod's, NXDOMAIN for the service without a ready
// record and for pods that are not ready, and the explanation's counts.
func checkService(c *harness.CoreDNS, proto string, s *service) error {
	ready := s.ready()
	if len(ready) == 0 {
		return expectRcode(c, proto, s.name(), dns.RcodeNameError)
	}
	// Each name below the service with the addresses it answers; SRV targets once per pod.
	names := map[string][]string{s.name(): nil}
	srv := map[string]bool{}
	for _, r := range ready {
		for _, name := range []string{s.name(), r.cluster + "." + s.name(), r.host + "." + r.cluster + "." + s.name()} {
			names[name] = append(names[name], r.addr)
		}
		for _, port := range r.ports {
			srv[fmt.Sprintf("%d %s.%s.%s", port, r.host, r.cluster, s.name())] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		var v4, v6 []string
		for _, a := range names[name] {
			if strings.Contains(a, ":") {
				v6 = append(v6, a)
			} else {
				v4 = append(v4, a)
			}
		}
		if err := cmp.Or(expectSet(c, proto, name, dns.TypeA, v4), expectSet(c, proto, name, dns.TypeAAAA, v6)); err != nil {
			return err
		}
	}
	for _, r := range s.records {
		if name := r.host + "." + r.cluster + "." + s.name(); names[name] == nil {
			if err := expectRcode(c, proto, name, dns.RcodeNameError); err != nil {
				return err
			}
		}
	}
	if err := expectSet(c, proto, s.name(), dns.TypeSRV, slices.Collect(maps.Keys(srv))); err != nil {
		return err
	}
	if err := checkZonesAndClients(c, proto, s, ready); err != nil {
		return err
	}
	counts := fmt.Sprintf("records=%d left-out=%d ", len(ready), len(s.records)-len(ready))
	if lines, _ := explainLines(c, s.name()); len(lines) == 0 || !strings.Contains(lines[0], counts) {
		return fmt.Errorf("dig CH TXT %s: %q, want %q", s.name(), lines, counts)
	}
	return nil
}

// checkZonesAndClients compares a replica's zonal names of s and its answers to clients on each
// node with the oracle's: a pinned zone's IPv4 records; the SRV answer, whose priorities are the
// client's tiers; every ready IPv4 record in those tiers' order (within a tier, answers rotate).
func checkZonesAndClients(c *harness.CoreDNS, proto string, s *service, ready []record) error {
	for node, zone := range nodes {
		var pinned []string
		srv := map[string]bool{}
		for _, r := range ready {
			if r.zone == zone && !strings.Contains(r.addr, ":") {
				pinned = append(pinned, r.addr)
			}
			for _, port := range r.ports {
				srv[fmt.Sprintf("%d %d %s.%s.%s", r.clientTier(node), port, r.host, r.cluster, s.name())] = true
			}
		}
		if err := expectSet(c, proto, zone+".pin._zone."+s.name(), dns.TypeA, pinned); err != nil {
			return err
		}
		r, err := exchangeFrom(c, proto, nodeAddrs()[node], s.name(), dns.TypeSRV)
		if err != nil {
			return err
		}
		var got []string
		for _, rr := range r.Answer {
			if rr, ok := rr.(*dns.SRV); ok {
				got = append(got, fmt.Sprintf("%d %d %s", rr.Priority, rr.Port, rr.Target))
			}
		}
		if slices.Sort(got); !slices.Equal(got, slices.Sorted(maps.Keys(srv))) {
			return fmt.Errorf("SRV %s from node %s over %s: %q, want %q", s.name(), node, proto, got, slices.Sorted(maps.Keys(srv)))
		}
		if r, err = exchangeFrom(c, proto, nodeAddrs()[node], s.name(), dns.TypeA); err != nil {
			return err
		}
		tierOf := map[string]int{}
		for _, rec := range ready {
			tierOf[rec.addr] = rec.clientTier(node)
		}
		last, n := -1, 0
		for _, rr := range r.Answer {
			a, ok := rr.(*dns.A)
			tier, known := tierOf[a.A.String()]
			if !ok || !known || tier < last {
				return fmt.Errorf("A %s from node %s over %s: %v out of its tiers %v", s.name(), node, proto, harness.Render(r.Answer), tierOf)
			}
			last, n = tier, n+1
		}
		if want := len(slices.DeleteFunc(slices.Clone(ready), func(r record) bool { return strings.Contains(r.addr, ":") })); n != want {
			return fmt.Errorf("A %s from node %s over %s: %d records, want %d", s.name(), node, proto, n, want)
		}
	}
	return nil
}

// exchangeFrom is exchangeErr in class IN, sent from address from.
func exchangeFrom(c *harness.CoreDNS, proto, from, qname string, qtype uint16) (*dns.Msg, error) {
	r, err := c.AskFrom(proto, from, "", qname, qtype)
	if err != nil {
		return nil, fmt.Errorf("%s %s over %s from %s: %w", dns.TypeToString[qtype], qname, proto, from, err)
	}
	return r, nil
}

// exchangeErr asks one question and returns the reply, or an error (never fails the test: the
// caller polls).
func exchangeErr(c *harness.CoreDNS, proto, qname string, qtype, class uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.Question[0].Qclass = class
	m.SetEdns0(4096, false)
	r, _, err := (&dns.Client{Net: proto}).Exchange(m, c.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s over %s: %w", dns.TypeToString[qtype], qname, proto, err)
	}
	return r, nil
}

func expectRcode(c *harness.CoreDNS, proto, qname string, rcode int) error {
	r, err := exchangeErr(c, proto, qname, dns.TypeA, dns.ClassINET)
	if err != nil {
		return err
	}
	if r.Rcode != rcode {
		return fmt.Errorf("A %s over %s: %s %v, want %s", qname, proto, dns.RcodeToString[r.Rcode], harness.Render(r.Answer), dns.RcodeToString[rcode])
	}
	return nil
}

// expectSet checks that qname's answer of qtype is exactly want, in any order (none: NODATA):
// addresses for A and AAAA, "port target" for SRV.
func expectSet(c *harness.CoreDNS, proto, qname string, qtype uint16, want []string) error {
	r, err := exchangeErr(c, proto, qname, qtype, dns.ClassINET)
	if err != nil {
		return err
	}
	var got []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			got = append(got, rr.A.String())
		case *dns.AAAA:
			got = append(got, rr.AAAA.String())
		case *dns.SRV:
			got = append(got, fmt.Sprintf("%d %s", rr.Port, rr.Target))
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
		return fmt.Errorf("%s %s over %s: %s %v, want %v", dns.TypeToString[qtype], qname, proto, dns.RcodeToString[r.Rcode], got, want)
	}
	return nil
}

// explainLines is the CH TXT explanation of qname over TCP (never truncated).
func explainLines(c *harness.CoreDNS, qname string) ([]string, error) {
	r, err := exchangeErr(c, "tcp", qname, dns.TypeTXT, dns.ClassCHAOS)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, rr := range r.Answer {
		if t, ok := rr.(*dns.TXT); ok {
			lines = append(lines, strings.Join(t.Txt, ""))
		}
	}
	return lines, nil
}
