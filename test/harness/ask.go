package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Render is a section as compact strings in order, without owner names and TTLs: "A 10.0.0.1",
// "SRV 0 50 5432 foo-0.east.foo.db.global.".
func Render(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, "A "+r.A.String())
		case *dns.AAAA:
			out = append(out, "AAAA "+r.AAAA.String())
		case *dns.SRV:
			out = append(out, fmt.Sprintf("SRV %d %d %d %s", r.Priority, r.Weight, r.Port, r.Target))
		case *dns.OPT:
		default:
			out = append(out, dns.TypeToString[rr.Header().Rrtype]+" "+strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
	}
	return out
}

// AskFrom sends qname over proto from address from, with an ECS option of prefix ecs when not
// "", and returns the reply or an error (never failing the test: callers poll).
func (c *CoreDNS) AskFrom(proto, from, ecs, qname string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(qname), qtype)
	m.SetEdns0(4096, false)
	if ecs != "" {
		ip, p, err := net.ParseCIDR(ecs)
		if err != nil {
			return nil, err
		}
		bits, _ := p.Mask.Size()
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(bits), Address: ip.To4()})
	}
	var local net.Addr = &net.UDPAddr{IP: net.ParseIP(from)}
	if proto == "tcp" {
		local = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	cl := &dns.Client{Net: proto, Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: local, Timeout: 2 * time.Second}}
	r, _, err := cl.Exchange(m, c.Addr)
	return r, err
}

// Metric is the value of one sample (name and labels, as exposed) of the process's metrics, ""
// when it has none.
func (c *CoreDNS) Metric(t testing.TB, sample string) string {
	t.Helper()
	for _, l := range strings.Split(Get(t, "http://"+c.MetricsAddr+"/metrics"), "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			return v
		}
	}
	return ""
}

// Get is the body of url, failing the test on any error.
func Get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
