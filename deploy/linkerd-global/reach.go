package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// queryTimeout bounds one DNS exchange or metrics scrape.
const queryTimeout = 10 * time.Second

// reacher reaches a port of a pod from where the CLI runs: through a port-forward, as `linkerd viz`
// reaches its pods (linkerd2 pkg/k8s/portforward.go), or at the pod's IP with --direct-pods.
type reacher struct {
	k      *kube
	direct bool
}

// open returns a host:port that reaches port of pod, and what to call when done with it.
func (r reacher) open(ctx context.Context, pod *corev1.Pod, port int) (string, func(), error) {
	if pod.Status.PodIP == "" {
		return "", nil, fmt.Errorf("pod %s has no IP", pod.Name)
	}
	if r.direct {
		return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)), func() {}, nil
	}
	transport, upgrader, err := spdy.RoundTripperFor(r.k.config)
	if err != nil {
		return "", nil, err
	}
	req := r.k.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward")
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, req.URL())
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"localhost"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	failed := make(chan error, 1)
	go func() { failed <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: %w", pod.Namespace, pod.Name, err)
	case <-ctx.Done():
		close(stop)
		return "", nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		close(stop)
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: no local port: %v", pod.Namespace, pod.Name, err)
	}
	return net.JoinHostPort("localhost", strconv.Itoa(int(ports[0].Local))), func() { close(stop) }, nil
}

// containerPort is pod's port named one of names (TCP), else def.
func containerPort(pod *corev1.Pod, def int, names ...string) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			for _, n := range names {
				if p.Name == n && p.Protocol != corev1.ProtocolUDP {
					return int(p.ContainerPort)
				}
			}
		}
	}
	return def
}

// exchange sends m to addr over TCP: explanations rarely fit a UDP answer, and a port-forward
// carries only TCP.
func exchange(ctx context.Context, addr string, m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Net: "tcp", Timeout: queryTimeout}
	r, _, err := c.ExchangeContext(ctx, m, addr)
	return r, err
}

// explanation asks addr for the CH TXT explanation of name: its rcode and its lines.
func explanation(ctx context.Context, addr, name string) (int, []line, error) {
	return explanationAs(ctx, addr, name, netip.Addr{})
}

// explanationAs is the explanation of name for the client at address as (when valid), which the
// plugin takes from an ECS option of a source explain_from trusts: the answer that client gets.
func explanationAs(ctx context.Context, addr, name string, as netip.Addr) (int, []line, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	m.SetEdns0(dns.MaxMsgSize, false)
	if as.IsValid() {
		family := uint16(1)
		if as.Is6() && !as.Is4In6() {
			family = 2
		}
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: family,
			SourceNetmask: uint8(as.BitLen()), Address: net.IP(as.AsSlice())})
	}
	r, err := exchange(ctx, addr, m)
	if err != nil {
		return 0, nil, err
	}
	var lines []line
	for _, rr := range r.Answer {
		if t, ok := rr.(*dns.TXT); ok {
			lines = append(lines, contract.ParseLine(strings.Join(t.Txt, "")))
		}
	}
	return r.Rcode, lines, nil
}

// line is one TXT string of an explanation, its fields in order.
type line = contract.Line

// scrape returns the samples of the metrics at http://addr/metrics whose name starts with prefix,
// by their line's name and labels: the plugin's few gauges need no exposition-format library.
func scrape(ctx context.Context, addr, prefix string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); i > 0 && err == nil {
			out[l[:i]] = v
		}
	}
	return out, nil
}
