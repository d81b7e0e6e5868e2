package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
)

// TestProtocolCompliance asks the real bin/coredns, over UDP and TCP, the questions of ISC's EDNS
// compatibility tests and of RFC 8906 (a server must answer, correctly, whatever it is asked), plus
// case, name length and answer size limits. The dig equivalents are in docs/troubleshooting.md.
func TestProtocolCompliance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, west := fooAndWest(t)
	// Three services of 30, 74 and 255 records in two tiers, for the size limits.
	for _, n := range []int{30, 74, 255} {
		for i, cluster := range []string{"west", "north"} {
			ready := make([]bool, n/2+i*(n%2))
			for j := range ready {
				ready[j] = true
			}
			m := mirrorOf(ns, "s"+fmt.Sprint(n), cluster, ready...)
			_, err := harness.CreateMirror(ctx, client(), m)
			testkit.Must(t, err)
		}
	}
	// A Service name of 63 bytes, the longest label.
	long := "l" + strings.Repeat("o", 61) + "g"
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), harness.StatefulSet{Namespace: ns, Service: long, Ports: dbPorts,
		Pods: []harness.Pod{{Name: "long-0", Node: ns + "-a", IP: "10.244.9.1", Ready: true}}}))

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns))
	fooNS := "foo." + ns + ".global."
	all := []string{"A 10.244.1.10", "A 10.244.2.11", "A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]}
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, all...)
	// The long name's slice is kube-controller-manager's to write, after its Pod: waited for too.
	eventuallyExpect(t, c, long+"."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.244.9.1")
	harness.Eventually(t, "s255 complete", func() error {
		if r := ask(t, c, "tcp", "s255."+ns+".global.", dns.TypeA); len(r.Answer) != 255 {
			return fmt.Errorf("%d records", len(r.Answer))
		}
		return nil
	})

	exchange := func(proto string, m *dns.Msg) *dns.Msg { return c.Exchange(t, m, proto) }
	question := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		return m
	}
	withEDNS := func(m *dns.Msg, size uint16, do bool) *dns.Msg { m.SetEdns0(size, do); return m }

	for _, proto := range []string{"udp", "tcp"} {
		t.Run(proto, func(t *testing.T) {
			// Plain DNS: an answer, and no OPT record in it.
			r := exchange(proto, question(fooNS, dns.TypeA))
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 4 || r.IsEdns0() != nil {
				t.Errorf("plain: %s %d answers, OPT %v", dns.RcodeToString[r.Rcode], len(r.Answer), r.IsEdns0())
			}
			// EDNS 0: an OPT record of version 0 back.
			r = exchange(proto, withEDNS(question(fooNS, dns.TypeA), 1232, false))
			if o := r.IsEdns0(); o == nil || o.Version() != 0 || len(r.Answer) != 4 {
				t.Errorf("EDNS 0: OPT %v, %d answers", o, len(r.Answer))
			}
			// EDNS version 100: BADVERS, with an OPT of the version we speak.
			m := withEDNS(question(fooNS, dns.TypeA), 1232, false)
			m.IsEdns0().SetVersion(100)
			r = exchange(proto, m)
			if r.Rcode != dns.RcodeBadVers || r.IsEdns0() == nil || r.IsEdns0().Version() != 0 || len(r.Answer) != 0 {
				t.Errorf("EDNS 100: %s, OPT %v", dns.RcodeToString[r.Rcode], r.IsEdns0())
			}
			// An unknown option and an unknown flag are not echoed.
			m = withEDNS(question(fooNS, dns.TypeA), 1232, false)
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte("x")})
			m.IsEdns0().Hdr.Ttl |= 0x80
			r = exchange(proto, m)
			if o := r.IsEdns0(); o == nil || len(o.Option) != 0 || o.Hdr.Ttl&0x7fff != 0 || len(r.Answer) != 4 {
				t.Errorf("unknown option and flag: OPT %v", o)
			}
			// DO: set in the answer's OPT.
			r = exchange(proto, withEDNS(question(fooNS, dns.TypeA), 1232, true))
			if o := r.IsEdns0(); o == nil || !o.Do() {
				t.Errorf("DO bit: OPT %v", o)
			}
			// Unknown types: NODATA with the SOA, never silence.
			for _, qtype := range []uint16{65280, dns.TypeMX, dns.TypeCAA} {
				testkit.Must(t, expect(t, c, fooNS, qtype, dns.RcodeSuccess))
			}
			// ANY: the addresses.
			r = exchange(proto, question(fooNS, dns.TypeANY))
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 4 {
				t.Errorf("ANY: %s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
			}
			// Opcodes other than QUERY: NOTIMP.
			for _, op := range []int{dns.OpcodeStatus, dns.OpcodeNotify, dns.OpcodeUpdate, 3} {
				m := question(fooNS, dns.TypeA)
				m.Opcode = op
				if r := exchange(proto, m); r.Rcode != dns.RcodeNotImplemented {
					t.Errorf("opcode %d: %s, want NOTIMP", op, dns.RcodeToString[r.Rcode])
				}
			}
			// Not exactly one question: FORMERR.
			for _, qs := range [][]dns.Question{nil, {{Name: fooNS, Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: fooNS, Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}}} {
				m := question(fooNS, dns.TypeA)
				m.Question = qs
				if r := exchange(proto, m); r.Rcode != dns.RcodeFormatError {
					t.Errorf("%d questions: %s, want FORMERR", len(qs), dns.RcodeToString[r.Rcode])
				}
			}
			// Zone transfers: refused.
			for _, qtype := range []uint16{dns.TypeAXFR, dns.TypeIXFR} {
				if r := exchange(proto, question("global.", qtype)); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
					t.Errorf("%s: %s, want REFUSED", dns.TypeToString[qtype], dns.RcodeToString[r.Rcode])
				}
			}
			// Case is kept; names are matched without it.
			r = exchange(proto, question(strings.ToUpper("foo."+ns)+".GlObAl.", dns.TypeA))
			if len(r.Answer) != 4 || r.Answer[0].Header().Name != strings.ToUpper("foo."+ns)+".GlObAl." || r.Question[0].Name != strings.ToUpper("foo."+ns)+".GlObAl." {
				t.Errorf("mixed case: %v", r)
			}
			// A 63-byte label; a 255-byte name.
			testkit.Must(t, expect(t, c, long+"."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.244.9.1"))
			name := ns + ".global."
			for len(name) < 254-63 {
				name = strings.Repeat("x", 62) + "." + name
			}
			name = strings.Repeat("y", 254-len(name)-1) + "." + name // 255 octets on the wire
			if l := len(name) + 1; l != 255 {
				t.Fatalf("test name is %d octets", l)
			}
			if r := exchange(proto, question(name, dns.TypeA)); r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
				t.Errorf("255-octet name: %s %v", dns.RcodeToString[r.Rcode], r.Ns)
			}
		})
	}

	// Sizes: over UDP exactly the longest best-tier prefix that fits the buffer, TC set when
	// anything was left out; over TCP everything.
	for _, n := range []int{30, 74, 255} {
		qname := fmt.Sprintf("s%d.%s.global.", n, ns)
		full := exchange("tcp", withEDNS(question(qname, dns.TypeA), 4096, false))
		if len(full.Answer) != n || full.Truncated {
			t.Fatalf("%s over TCP: %d records, TC %v", qname, len(full.Answer), full.Truncated)
		}
		for _, size := range []uint16{512, 1232, 4096} {
			r := exchange("udp", withEDNS(question(qname, dns.TypeA), size, false))
			got := len(r.Answer)
			if strings.Join(harness.Render(r.Answer), "|") != strings.Join(harness.Render(full.Answer[:got]), "|") {
				t.Errorf("%s at %d: not a prefix of the full answer", qname, size)
			}
			if r.Truncated != (got < n) {
				t.Errorf("%s at %d: %d of %d records, TC %v", qname, size, got, n, r.Truncated)
			}
			r.Compress = true
			if r.Len() > int(size) {
				t.Errorf("%s at %d: %d bytes", qname, size, r.Len())
			}
			if got < n {
				more := r.Copy()
				more.Answer = append(more.Answer, full.Answer[got])
				more.Truncated, more.Compress = false, true
				if more.Len() <= int(size) {
					t.Errorf("%s at %d: %d records sent, %d would fit", qname, size, got, got+1)
				}
			}
			t.Logf("%s at %d bytes: %d records, TC %v", qname, size, got, r.Truncated)
		}
	}
}
