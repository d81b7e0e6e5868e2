package harness

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of an address (the API server) that a test can cut
// and restore: a network partition between one client and the API server, while others keep
// their link.
type Proxy struct {
	Addr   string // 127.0.0.1:PORT to dial instead of the target
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{} // client-side connections, to close on Cut and Restore
}

// StartProxy starts a proxy to target, stopped when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("harness: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	return p
}

// Cut drops every connection and black-holes new ones (accepted, never answered) until Restore,
// as a partition does: clients see their requests hang, then time out.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.closeAll()
}

// Restore ends the partition: held connections are closed (clients reconnect), new ones pass.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.closeAll()
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		cut := p.cut
		p.mu.Unlock()
		if !cut {
			go p.forward(c)
		}
	}
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
}

// KubeconfigVia writes a kubeconfig for token (coredns's, Options.CoreDNSUser's or the admin's, when
// empty) that reaches the API server through p.
func (cp *ControlPlane) KubeconfigVia(p *Proxy, token string) (string, error) {
	if token == "" {
		token = cp.coreDNSToken
	}
	_, port, _ := net.SplitHostPort(p.Addr)
	return cp.writeKubeconfigAt("kubeconfig-via-"+port, "user", token, "https://"+p.Addr)
}
