package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/miekg/dns"
)

// EnvCoreDNSBin overrides the path of the coredns binary.
const EnvCoreDNSBin = "GLOBAL_COREDNS_BIN"

// modulePath identifies the repository root's go.mod.
const modulePath = "github.com/globaldns/global"

// CoreDNSBinary returns $GLOBAL_COREDNS_BIN, else <repo root>/bin/coredns,
// where the repo root is the nearest directory above the working directory
// whose go.mod declares this project's module.
func CoreDNSBinary() (string, error) {
	bin := os.Getenv(EnvCoreDNSBin)
	if bin == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("find coredns binary: %w; run `make build` or set %s", err, EnvCoreDNSBin)
		}
		bin = filepath.Join(root, "bin", "coredns")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("no coredns binary at %s: run `make build`, which builds it (or set %s)", bin, EnvCoreDNSBin)
	}
	return bin, nil
}

// repoRoot walks up from the working directory to this module's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declaresModule(string(b)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func declaresModule(gomod string) bool {
	for _, line := range strings.Split(gomod, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && f[1] == modulePath {
			return true
		}
	}
	return false
}

// CoreDNS is a running coredns process.
type CoreDNS struct {
	Addr        string // 127.0.0.1:PORT, DNS over UDP and TCP
	HealthAddr  string // host:port of the health plugin, if the Corefile has it
	ReadyAddr   string // host:port of the ready plugin, if the Corefile has it
	MetricsAddr string // host:port of the prometheus plugin, if the Corefile has it
	PprofAddr   string // host:port of the pprof plugin, if the Corefile has it
	Dir         string // holds Corefile and coredns.log

	proc *process
	stop sync.Once
}

// CoreDNSOption adjusts StartCoreDNS.
type CoreDNSOption func(*coreDNSOptions)

type coreDNSOptions struct {
	kubeconfig string
	env        []string
	files      map[string]string
	binary     string
}

// WithBinary runs the coredns binary at path instead of CoreDNSBinary() (another release's).
func WithBinary(path string) CoreDNSOption {
	return func(o *coreDNSOptions) { o.binary = path }
}

// WithKubeconfig makes {{.Kubeconfig}} path instead of the control plane's
// CoreDNSKubeconfig (e.g. one from ControlPlane.KubeconfigFor, for RBAC tests).
func WithKubeconfig(path string) CoreDNSOption {
	return func(o *coreDNSOptions) { o.kubeconfig = path }
}

// WithEnv adds KEY=VALUE entries to the coredns environment.
func WithEnv(kv ...string) CoreDNSOption {
	return func(o *coreDNSOptions) { o.env = append(o.env, kv...) }
}

// WithFiles writes files (path relative to the Corefile's directory: template) next to the
// Corefile before coredns starts, for what it imports or reads by a relative path. Each is a
// template like the Corefile's, with the same data: an imported server block's {{.Port}} is the
// Corefile's.
func WithFiles(files map[string]string) CoreDNSOption {
	return func(o *coreDNSOptions) { o.files = files }
}

// corefileData is the data of a Corefile template. Its methods allocate
// ports lazily, so an address is set exactly when the template used it and
// the wait knows which endpoints to check.
type corefileData struct {
	kubeconfig             string
	port                   int
	health, ready, metrics string
	pprof                  string
	usedPort, usedKcfg     bool
	taken                  map[int]bool // ports handed out, kept distinct
	err                    error
}

// Port is the DNS port (UDP and TCP) on 127.0.0.1.
func (d *corefileData) Port() int { d.usedPort = true; return d.port }

// Health is a free host:port for the health plugin.
func (d *corefileData) Health() string { return d.addr(&d.health) }

// Ready is a free host:port for the ready plugin.
func (d *corefileData) Ready() string { return d.addr(&d.ready) }

// Metrics is a free host:port for the prometheus plugin.
func (d *corefileData) Metrics() string { return d.addr(&d.metrics) }

// Pprof is a free host:port for the pprof plugin.
func (d *corefileData) Pprof() string { return d.addr(&d.pprof) }

// Kubeconfig is the kubeconfig path for the kubernetes-style plugins.
func (d *corefileData) Kubeconfig() string { d.usedKcfg = true; return d.kubeconfig }

func (d *corefileData) addr(a *string) string {
	for *a == "" && d.err == nil {
		p, err := freePort()
		if err != nil {
			d.err = err
		} else if !d.taken[p] {
			d.taken[p] = true
			*a = "127.0.0.1:" + strconv.Itoa(p)
		}
	}
	return *a
}

// StartCoreDNS renders corefileTemplate (text/template with .Port, .Health,
// .Ready, .Metrics and .Kubeconfig) into a Corefile in a temp dir, runs
// CoreDNSBinary() -conf Corefile, and waits until the DNS port answers and,
// if the template used .Ready, until /ready returns 200. The template must
// use .Port. cp may be nil when the Corefile needs no Kubernetes API. The
// process is stopped when the test ends; if the test failed, the last 100
// log lines are logged.
func StartCoreDNS(t testing.TB, cp *ControlPlane, corefileTemplate string, opts ...CoreDNSOption) *CoreDNS {
	t.Helper()
	bin, err := CoreDNSBinary()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	var o coreDNSOptions
	if cp != nil {
		o.kubeconfig = cp.CoreDNSKubeconfig
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.binary != "" {
		bin = o.binary
	}
	tmpl, err := template.New("Corefile").Option("missingkey=error").Parse(corefileTemplate)
	if err != nil {
		t.Fatalf("harness: parse Corefile template: %v", err)
	}
	for attempt := 1; ; attempt++ {
		// A directory per attempt: a retried start's log holds its own lines only.
		c, err := startCoreDNSTemplate(bin, tmpl, t.TempDir(), o)
		if err == nil {
			t.Cleanup(func() {
				c.Stop()
				if t.Failed() {
					t.Logf("last 100 lines of %s:\n%s", c.proc.logPath, tailFile(c.proc.logPath, 100))
				}
			})
			return c
		}
		if !errors.Is(err, errPortInUse) || attempt == 3 {
			t.Fatalf("harness: start coredns: %v", err)
		}
	}
}

// startCoreDNSTemplate renders tmpl with fresh ports and starts coredns.
func startCoreDNSTemplate(bin string, tmpl *template.Template, dir string, o coreDNSOptions) (*CoreDNS, error) {
	port, err := freeDNSPort()
	if err != nil {
		return nil, err
	}
	d := &corefileData{kubeconfig: o.kubeconfig, port: port, taken: map[int]bool{port: true}}
	var b strings.Builder
	if err := tmpl.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("render Corefile: %w", err)
	}
	for name, text := range o.files {
		if err := writeTemplate(filepath.Join(dir, name), text, d); err != nil {
			return nil, err
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if !d.usedPort {
		return nil, errors.New("the Corefile template must use {{.Port}} for the DNS port")
	}
	if d.usedKcfg && d.kubeconfig == "" {
		return nil, errors.New("the Corefile template uses {{.Kubeconfig}} but there is no control plane or WithKubeconfig")
	}
	c := &CoreDNS{
		Addr:        "127.0.0.1:" + strconv.Itoa(port),
		HealthAddr:  d.health,
		ReadyAddr:   d.ready,
		MetricsAddr: d.metrics,
		PprofAddr:   d.pprof,
		Dir:         dir,
	}
	return c, c.run(bin, b.String(), nil, o.env)
}

// writeTemplate renders text with data into path, making its directory.
func writeTemplate(path, text string, data *corefileData) error {
	tmpl, err := template.New(filepath.Base(path)).Option("missingkey=error").Parse(text)
	if err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		return fmt.Errorf("render %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// StartCoreDNSProcess runs CoreDNSBinary() with an already rendered corefile
// in dir (made if missing), copying its log to out if not nil. It is the
// non-test variant for the demo. The addresses are read from the Corefile:
// the DNS port of the first server block (default 53) and the ready, health
// and prometheus plugins' listen addresses. env adds KEY=VALUE entries to
// its environment. It waits like StartCoreDNS; the caller must Stop the process.
func StartCoreDNSProcess(corefile, dir string, out io.Writer, env ...string) (*CoreDNS, error) {
	bin, err := CoreDNSBinary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make coredns dir: %w", err)
	}
	a := parseCorefileAddrs(corefile)
	c := &CoreDNS{Addr: a.dns, HealthAddr: a.health, ReadyAddr: a.ready, MetricsAddr: a.metrics, Dir: dir}
	if err := c.run(bin, corefile, out, env); err != nil {
		return nil, err
	}
	return c, nil
}

// run writes the Corefile, starts coredns and waits until it serves.
func (c *CoreDNS) run(bin, corefile string, out io.Writer, env []string) error {
	if err := os.WriteFile(filepath.Join(c.Dir, "Corefile"), []byte(corefile), 0o644); err != nil {
		return fmt.Errorf("write Corefile: %w", err)
	}
	p, err := startProcess("coredns", c.Dir, out, env, bin, "-conf", "Corefile")
	if err != nil {
		return err
	}
	c.proc = p
	if err := c.waitServing(); err != nil {
		p.terminate(time.Second)
		return portClash(p, err)
	}
	return nil
}

// waitServing waits until coredns has printed its banner, which it does once its servers
// listen (so a reply is its own, not that of another process on the port), a UDP query for
// ". SOA" gets any reply and, if the ready plugin is configured, GET /ready returns 200.
func (c *CoreDNS) waitServing() error {
	ctx := context.Background()
	client := &dns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
	m := new(dns.Msg).SetQuestion(".", dns.TypeSOA)
	if err := waitFor(ctx, c.proc, "coredns to answer DNS on "+c.Addr, func(context.Context) (bool, error) {
		if !c.proc.logged("CoreDNS-") {
			return false, nil
		}
		_, _, err := client.Exchange(m, c.Addr)
		return err == nil, nil
	}); err != nil {
		return err
	}
	if c.ReadyAddr == "" {
		return nil
	}
	return waitHTTP(ctx, c.proc, "http://"+c.ReadyAddr+"/ready", "", func(code int, _ string) bool {
		return code == http.StatusOK
	})
}

// Stop sends SIGTERM and SIGKILL after 10 s. It is idempotent.
func (c *CoreDNS) Stop() {
	c.stop.Do(func() { c.proc.terminate(10 * time.Second) })
}

// Kill kills the process with SIGKILL and waits for it.
func (c *CoreDNS) Kill() {
	c.stop.Do(c.proc.kill)
}

// PID is the coredns process's id (for reading its memory from /proc).
func (c *CoreDNS) PID() int { return c.proc.cmd.Process.Pid }

// CPUTime returns the CPU time (user and system) coredns has used so far, read from /proc.
func (c *CoreDNS) CPUTime() (time.Duration, bool) { return c.proc.cpuTime() }

// RSS returns the process's resident set size in bytes; false when it cannot be read.
func (c *CoreDNS) RSS() (float64, bool) { return c.proc.rss() }

// Signal sends sig to the coredns process (e.g. SIGUSR1 to reload).
func (c *CoreDNS) Signal(sig os.Signal) error {
	if err := c.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal coredns: %w", err)
	}
	return nil
}

// Exited reports whether the process has exited; Tail returns the last n lines of its log.
func (c *CoreDNS) Exited() bool      { return c.proc.exited() }
func (c *CoreDNS) Tail(n int) string { return tailFile(c.proc.logPath, n) }

// Logs returns coredns's log so far.
func (c *CoreDNS) Logs() string {
	b, err := os.ReadFile(c.proc.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.proc.logPath, err)
	}
	return string(b)
}

// Exchange sends m to Addr over proto ("udp" or "tcp") with a 2 s timeout,
// retrying up to 3 times on timeouts, and fails the test on any error.
func (c *CoreDNS) Exchange(t testing.TB, m *dns.Msg, proto string) *dns.Msg {
	t.Helper()
	client := &dns.Client{Net: proto, Timeout: 2 * time.Second}
	var err error
	for range 4 {
		var r *dns.Msg
		r, _, err = client.Exchange(m, c.Addr)
		if err == nil {
			return r
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			break
		}
	}
	t.Fatalf("harness: %s query %v to coredns at %s: %v", proto, m.Question, c.Addr, err)
	return nil
}

// corefileAddrs are the listen addresses found in a rendered Corefile.
type corefileAddrs struct{ dns, health, ready, metrics string }

// parseCorefileAddrs reads the DNS port of the first server block and the
// addresses of the first health, ready and prometheus directives, applying
// the plugins' defaults. It understands plain Corefiles, not snippets or
// imports, which is all the demo needs.
func parseCorefileAddrs(corefile string) corefileAddrs {
	a := corefileAddrs{dns: "127.0.0.1:53"}
	depth, sawBlock := 0, false
	sc := bufio.NewScanner(strings.NewReader(corefile))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(strings.NewReplacer("{", " { ", "}", " } ").Replace(line))
		if len(f) == 0 {
			continue
		}
		if depth == 0 && !sawBlock && f[0] != "{" && f[0] != "}" {
			sawBlock = true
			key := strings.TrimSuffix(f[0], ",")
			key = strings.TrimPrefix(key, "dns://")
			if i := strings.LastIndexByte(key, ':'); i >= 0 {
				a.dns = "127.0.0.1:" + key[i+1:]
			}
		}
		if depth == 1 {
			arg := ""
			if len(f) > 1 && f[1] != "{" {
				arg = f[1]
			}
			switch f[0] {
			case "health":
				setAddr(&a.health, arg, ":8080")
			case "ready":
				setAddr(&a.ready, arg, ":8181")
			case "prometheus":
				setAddr(&a.metrics, arg, "localhost:9153")
			}
		}
		for _, tok := range f {
			switch tok {
			case "{":
				depth++
			case "}":
				depth--
			}
		}
	}
	return a
}

// setAddr sets *dst (once) to arg or def, with an empty host made 127.0.0.1.
func setAddr(dst *string, arg, def string) {
	if *dst != "" {
		return
	}
	if arg == "" {
		arg = def
	}
	if strings.HasPrefix(arg, ":") {
		arg = "127.0.0.1" + arg
	}
	*dst = arg
}
