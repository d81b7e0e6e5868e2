package harness

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	k8sversion "k8s.io/apimachinery/pkg/version"
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

// FaultyAPI is an HTTPS reverse proxy on loopback in front of the API server that answers 503
// Service Unavailable to the requests fails matches, until Heal: an API server whose aggregated
// or custom APIs are not ready yet, as after a start.
type FaultyAPI struct {
	Addr    string // 127.0.0.1:PORT to reach the API server through
	healed  atomic.Bool
	matches func(*http.Request) bool
}

// StartFaultyAPI starts a FaultyAPI to cp's API server failing what fails matches, stopped when
// the test ends.
func StartFaultyAPI(t testing.TB, cp *ControlPlane, fails func(*http.Request) bool) *FaultyAPI {
	t.Helper()
	f := &FaultyAPI{matches: fails}
	f.Addr = inFront(t, cp, func(w http.ResponseWriter, r *http.Request) bool {
		if !f.healed.Load() && f.matches(r) {
			http.Error(w, "the harness's faulty API: unavailable", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	return f
}

// StartUpgradedAPI starts an HTTPS reverse proxy on loopback in front of cp's API server that says
// it is Kubernetes version (GET /version, e.g. v1.38.0) and passes every other request on: the
// API server of a cluster upgraded to that release, for what reads its version (Helm's kubeVersion,
// linkerd global check). It answers as kube-apiserver does (k8s.io/apiserver v0.37.1,
// pkg/server/routes/version.go handleVersion: 200, the JSON of k8s.io/apimachinery's version.Info).
// It returns an admin kubeconfig through it; stopped when the test ends.
func StartUpgradedAPI(t testing.TB, cp *ControlPlane, version string) string {
	t.Helper()
	var major, minor int
	if _, err := fmt.Sscanf(version, "v%d.%d.", &major, &minor); err != nil {
		t.Fatalf("harness: version %q: %v", version, err)
	}
	addr := inFront(t, cp, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/version" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(k8sversion.Info{Major: strconv.Itoa(major), Minor: strconv.Itoa(minor), GitVersion: version,
			GitTreeState: "clean", GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH})
		return true
	})
	_, port, _ := net.SplitHostPort(addr)
	kubeconfig, err := cp.writeKubeconfigAt("kubeconfig-upgraded-"+port, "admin", cp.adminToken, "https://"+addr)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return kubeconfig
}

// inFront starts an HTTPS reverse proxy on loopback in front of cp's API server, stopped when the
// test ends, and returns its address: each request is intercept's, or passed on when it returns
// false.
func inFront(t testing.TB, cp *ControlPlane, intercept func(http.ResponseWriter, *http.Request) bool) string {
	t.Helper()
	target, err := url.Parse(cp.APIServerURL())
	if err != nil {
		t.Fatalf("harness: proxy to the API server: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
	proxy.FlushInterval = -1 // watches stream
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !intercept(w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// Heal passes every request on from now on.
func (f *FaultyAPI) Heal() { f.healed.Store(true) }

// KubeconfigThrough writes a kubeconfig for coredns's token that reaches the API server through f.
func (cp *ControlPlane) KubeconfigThrough(f *FaultyAPI) (string, error) {
	_, port, _ := net.SplitHostPort(f.Addr)
	return cp.writeKubeconfigAt("kubeconfig-through-"+port, "user", cp.coreDNSToken, "https://"+f.Addr)
}
