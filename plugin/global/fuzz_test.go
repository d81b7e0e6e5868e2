package global

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/stanza"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// FuzzServeDNS feeds raw wire messages to ServeDNS, as the server would: messages the server
// rejects before any plugin (unparsable, not exactly one question, not a query, a response) are
// skipped, as CoreDNS's own plugin/pkg/fuzz does. Every reply must pack, echo the question and ID,
// and fit the client's buffer.
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"foo.db.global.", dns.TypeA}, {"FoO.gLoBaL.", dns.TypeAAAA}, {"_db._tcp.foo.db.global.", dns.TypeSRV},
		{"foo-0.west.foo.db.global.", dns.TypeA}, {"global.", dns.TypeNS}, {"ns1.dns.global.", dns.TypeA},
		{"a.b.c.d.e.global.", dns.TypeTXT}, {"example.org.", dns.TypeA}, {"foo.db.global.", dns.TypeANY},
		{`f\.oo.db.global.`, dns.TypeA}, {"global.", dns.TypeAXFR},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(512, true)
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	g := newGlobal(f, source())
	g.Next = test.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		w.WriteMsg(m)
		return dns.RcodeRefused, nil
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := new(dns.Msg)
		if r.Unpack(data) != nil || len(r.Question) != 1 || r.Response || dns.DefaultMsgAcceptFunc(dns.Header{
			Id: r.Id, Bits: bits(r), Qdcount: 1, Ancount: uint16(len(r.Answer)), Nscount: uint16(len(r.Ns)), Arcount: uint16(len(r.Extra)),
		}) != dns.MsgAccept {
			return
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{})
		if _, err := g.ServeDNS(context.Background(), request.NewScrubWriter(r, rec), r); err != nil {
			t.Fatalf("ServeDNS: %v", err)
		}
		m := rec.Msg
		if m == nil {
			t.Fatal("no reply")
		}
		if m.Id != r.Id || len(m.Question) != 1 || m.Question[0] != r.Question[0] {
			t.Fatalf("reply %v does not echo the question of %v", m, r)
		}
		packed, err := m.Pack()
		if err != nil {
			t.Fatalf("the reply does not pack: %v\n%v", err, m)
		}
		state := request.Request{Req: r, W: rec}
		if size := state.Size(); len(packed) > size {
			t.Fatalf("a %d-byte reply to a %d-byte buffer", len(packed), size)
		}
	})
}

// bits rebuilds the header flag word DefaultMsgAcceptFunc inspects.
func bits(r *dns.Msg) uint16 {
	b := uint16(r.Opcode&0xF) << 11
	if r.Response {
		b |= 1 << 15
	}
	return b
}

// FuzzParse feeds arbitrary text to the Corefile parser: it must return an error or a valid
// configuration, never panic or hang.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"global",
		"global global. mesh.example {\n kubeconfig /k ctx\n namespaces a b\n cluster east\n locality east zone=z region=r\n topology zone region\n ttl 30\n fallthrough\n startup_timeout 1s\n prefer_namespaces a\n export_selector a in (b, c)\n}",
		"global {\n endpointslices off\n endpointslice_size 7\n service_suffix -x\n lease ns n\n lease_duration 30s\n lease_renew_deadline 20s\n lease_retry_period 1s\n apiserver_qps 1.5\n apiserver_burst 3\n}",
		"global {\n locality west example.com/rack=r1\n}",
		"global {\n ttl 99999999999999999999\n}",
		"global {\n {\n}",
		"global \"quoted zone\" {\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, corefile string) {
		done := make(chan struct{})
		var g *Global
		var err error
		go func() {
			defer close(done)
			g, err = parseGlobal(caddy.NewTestController("dns", corefile))
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("parse hangs on %q", corefile)
		}
		if err != nil || g == nil {
			return
		}
		if g.TTL > 3600 || g.writerConfig.MaxEndpoints < 1 || g.writerConfig.MaxEndpoints > 1000 || !g.leaseTimings().CheckTimings() ||
			g.startupTimeout < 0 || g.corefile.Local == "" || len(g.Zones) == 0 {
			t.Fatalf("invalid configuration accepted from %q: %+v", corefile, g)
		}
		for _, z := range g.Zones {
			if zs, err := stanza.ZoneArgs([]string{z}); err != nil || !slices.Equal(zs, []string{z}) || !strings.HasSuffix(z, ".") {
				t.Fatalf("zone %q accepted from %q", z, corefile)
			}
		}
	})
}
