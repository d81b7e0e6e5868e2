// Package harness runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager) and the project's coredns binary as child
// processes on loopback, and creates Kubernetes objects exactly as Linkerd's
// multicluster service mirror and Kubernetes itself do. It serves the
// integration tests and the demo.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child process whose output goes to a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{} // closed once the process has exited
	err     error         // exit error, valid after done is closed
	stop    sync.Once
}

// startProcess runs bin with args, writing stdout and stderr to dir/<name>.log
// and, when out is not nil, also to out with a "[name] " prefix per line.
// env entries (KEY=VALUE) are added to the current environment.
func startProcess(name, dir string, out io.Writer, env []string, bin string, args ...string) (*process, error) {
	logPath := dir + "/" + name + ".log"
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var w io.Writer = f
	if out != nil {
		w = io.MultiWriter(f, &prefixWriter{w: out, prefix: "[" + name + "] "})
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group, so Stop reaches anything the child forks.
		Setpgid: true,
		// If the test binary dies without running cleanups (panic, timeout,
		// SIGKILL), the kernel kills the child: no leaked servers.
		Pdeathsig: syscall.SIGKILL,
	}
	// A grandchild holding the output pipe must not block Wait forever.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, logFile: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// cpuTime is the CPU time (user and system) the process has used, from /proc/<pid>/stat.
// rss returns the process's resident set size in bytes, from /proc.
func (p *process) rss() (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

func (p *process) cpuTime() (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	// The fields after the command (in parentheses, which may hold spaces and parentheses):
	// utime and stime are the 14th and 15th of the line, in clock ticks (USER_HZ, 100 on Linux).
	i := bytes.LastIndex(b, []byte(") "))
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// exited reports whether the process has already exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process group of p.
func (p *process) signalGroup(sig syscall.Signal) {
	// The negative pid addresses the whole group (Setpgid made pgid == pid).
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// terminate sends SIGTERM, waits up to grace, then SIGKILLs the group and
// waits for the exit. It is safe to call more than once.
func (p *process) terminate(grace time.Duration) {
	p.stop.Do(func() {
		if !p.exited() {
			p.signalGroup(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(grace):
			}
		}
		// Also after a clean exit: a forked grandchild may still be around.
		p.signalGroup(syscall.SIGKILL)
		<-p.done
	})
}

// kill SIGKILLs the process group and waits for the exit.
func (p *process) kill() {
	p.stop.Do(func() {
		p.signalGroup(syscall.SIGKILL)
		<-p.done
	})
}

// exitError describes an early exit of p with the tail of its log.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited early (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, tailFile(p.logPath, 40))
}

// logContains reports whether p's log contains s.
func (p *process) logContains(s string) bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte(s))
}

// errPortInUse marks start failures caused by a port taken between picking
// and binding it; the caller retries with new ports.
var errPortInUse = errors.New("port already in use")

// portClash wraps err with errPortInUse when p's log shows a bind failure.
func portClash(p *process, err error) error {
	if p.logContains("address already in use") {
		return fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return err
}

// tailFile returns the last n lines of the file at path.
// logged tells whether the process's log holds s.
func (p *process) logged(s string) bool {
	b, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(b, []byte(s))
}

func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	// The apiserver log can be large; the last 256 KiB hold enough lines.
	const window = 256 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(st.Size()-window, io.SeekStart)
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) { return first(pickPorts(1, false)) }

// first is the first of ports.
func first(ports []int, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// handedOut are the ports given to this test binary's processes. A port is free again once the
// listener that found it closes, so it could be found again for a second process before the first
// listens on it; and coredns listens with SO_REUSEPORT, so both would bind it, and one's queries
// reach the other. No port is handed out twice.
var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
	nextPort    int
)

// The ports handed out are below the kernel's ephemeral range (ip_local_port_range, from 32768
// by default), where connect picks the local ports of outgoing connections: the tests open
// hundreds a second, and a port found free there could be a connection's before the process
// given it binds it.
const lowestPort = 10000

// ephemeralStart is the first port of the kernel's ephemeral range, read once.
var ephemeralStart = sync.OnceValue(func() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > lowestPort+1000 {
				return n
			}
		}
	}
	return 32768
})

// candidatePort is the next port to try, in turn from a random start, so that test binaries
// running beside each other mostly try different ports; false once every one was handed out.
func candidatePort() (int, bool) {
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	span := ephemeralStart() - lowestPort
	if nextPort == 0 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		nextPort = lowestPort + (int(b[0])<<8|int(b[1]))%span
	}
	for range span {
		p := nextPort
		nextPort = lowestPort + (nextPort-lowestPort+1)%span
		if !handedOut[p] {
			handedOut[p] = true
			return p, true
		}
	}
	return 0, false
}

// pickPorts returns n distinct ports of 127.0.0.1 free over TCP (and, with udp, over UDP too) a
// moment ago: their listeners are kept open until all are found.
func pickPorts(n int, udp bool) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ls) < n; tries++ {
		port, ok := candidatePort()
		if !ok || tries == 5000 {
			return nil, errors.New("pick a free port: none free below the ephemeral range")
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if udp {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				l.Close()
				continue
			}
			u.Close()
		}
		ls = append(ls, l)
	}
	ports := make([]int, n)
	for i, l := range ls {
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// FreeAddr returns a loopback address whose TCP and UDP ports are both free right now, for a
// DNS server to listen on.
func FreeAddr() (string, error) {
	port, err := freeDNSPort()
	return "127.0.0.1:" + strconv.Itoa(port), err
}

// freeDNSPort is a port of 127.0.0.1 free over TCP and UDP a moment ago.
func freeDNSPort() (int, error) { return first(pickPorts(1, true)) }

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) { return pickPorts(n, false) }

// outMu serialises writes of all processes to shared Out writers.
var outMu sync.Mutex

// prefixWriter writes complete lines to w, each prefixed.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (pw *prefixWriter) Write(b []byte) (int, error) {
	pw.buf = append(pw.buf, b...)
	for {
		i := bytes.IndexByte(pw.buf, '\n')
		if i < 0 {
			break
		}
		outMu.Lock()
		_, _ = io.WriteString(pw.w, pw.prefix+string(pw.buf[:i+1]))
		outMu.Unlock()
		pw.buf = pw.buf[i+1:]
	}
	return len(b), nil
}

// waitHTTP polls url (with a bearer token, TLS unverified) until ok accepts
// the answer, p exits, or readyTimeout passes.
func waitHTTP(ctx context.Context, p *process, url, token string, ok func(code int, body string) bool) error {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	defer client.CloseIdleConnections()
	last := "no answer"
	err := waitFor(ctx, p, "GET "+url, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return ok(resp.StatusCode, string(body)), nil
	})
	if err != nil {
		return fmt.Errorf("%w; last answer: %s", err, last)
	}
	return nil
}

// waitFor polls cond every 10 ms until it is true, it fails, p exits
// (error with p's log tail), or readyTimeout (or ctx) expires (error with
// p's log tail). 10 ms: the bench times start-up with it.
func waitFor(ctx context.Context, p *process, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
		done, err := cond(callCtx)
		callCancel()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("waiting for %s: %w", what, p.exitError())
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; last lines of %s:\n%s", what, ctx.Err(), p.logPath, tailFile(p.logPath, 40))
		case <-tick.C:
		}
	}
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
