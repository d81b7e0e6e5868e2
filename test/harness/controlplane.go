package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// EnvControlPlaneBin names the directory holding etcd, kube-apiserver and
// kube-controller-manager.
const EnvControlPlaneBin = "GLOBAL_CONTROLPLANE_BIN"

// readyTimeout bounds each readiness wait; generous for a loaded 2-core CI.
const readyTimeout = 60 * time.Second

// Token is a static bearer token user of the apiserver (--token-auth-file).
type Token struct {
	Token  string
	User   string
	Groups []string
}

// Options configures StartControlPlane.
type Options struct {
	// Dir holds data, certs and logs. If empty, a new temporary directory is
	// made and removed by Stop.
	Dir string
	// Out, if set, also receives the processes' logs, prefixed per line
	// (for the demo). The log files in Dir are always written.
	Out io.Writer
	// ExtraTokens are added to tokens.csv besides the admin token.
	ExtraTokens []Token
	// CoreDNSUser, if set, is added to them too, and is who coredns is by default: StartCoreDNS's
	// {{.Kubeconfig}} and KubeconfigVia's token. The admin otherwise.
	CoreDNSUser *Token
	// Controllers are kube-controller-manager controllers run besides the harness's own
	// (deployment and replicaset, for a test that rolls a Deployment out).
	Controllers []string
	// Scheduler also runs kube-scheduler, which binds pods to the Nodes tests create.
	Scheduler bool
}

// ControlPlane is a running etcd + kube-apiserver + kube-controller-manager.
type ControlPlane struct {
	Dir        string // data, certs, kubeconfigs and logs (etcd.log, kube-apiserver.log, kube-controller-manager.log)
	Kubeconfig string // admin kubeconfig: system:masters bearer token, insecure-skip-tls-verify
	// CoreDNSKubeconfig is Options.CoreDNSUser's kubeconfig, else Kubeconfig.
	CoreDNSKubeconfig string
	Config            *rest.Config
	Client            kubernetes.Interface

	out          io.Writer
	ownsDir      bool
	adminToken   string
	coreDNSToken string // CoreDNSUser's, else adminToken
	apiPort      int
	etcdURL      string // client URL, for CompactEtcd
	apiBin       string
	apiArgs      []string
	opts         Options
	procs        []*process // in start order: etcd, kube-apiserver, kube-controller-manager
	stopOnce     sync.Once
}

// controlPlaneBinaries returns the paths of the three binaries, or an error
// telling how to build them.
func controlPlaneBinaries() (etcd, apiserver, kcm string, err error) {
	dir := os.Getenv(EnvControlPlaneBin)
	if dir == "" {
		return "", "", "", fmt.Errorf("%s is not set: run `make controlplane` (or `make test`), which builds etcd, kube-apiserver and kube-controller-manager and sets it", EnvControlPlaneBin)
	}
	paths := make([]string, 3)
	for i, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		paths[i] = filepath.Join(dir, name)
		if st, err := os.Stat(paths[i]); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", "", "", fmt.Errorf("%s=%s has no executable %s: run `make controlplane` (or `make test`), which builds it", EnvControlPlaneBin, dir, name)
		}
	}
	return paths[0], paths[1], paths[2], nil
}

// Start starts a control plane for t in a directory under t.TempDir() and
// stops it when the test ends. Failures (including missing binaries) are
// fatal, never skips.
func Start(t testing.TB) *ControlPlane {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with opts (its Dir is t's).
func StartWith(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*readyTimeout)
	defer cancel()
	opts.Dir = t.TempDir()
	cp, err := StartControlPlane(ctx, opts)
	if err != nil {
		t.Fatalf("harness: start control plane: %v", err)
	}
	t.Cleanup(cp.Stop)
	return cp
}

// StartControlPlane starts etcd, kube-apiserver and kube-controller-manager
// on free loopback ports. It returns once /readyz says ok, the default
// namespace exists and kube-controller-manager has shown that its
// controllers run (see waitControllerManager). On error nothing is left
// running; the error includes the tail of the failing process's log.
func StartControlPlane(ctx context.Context, opts Options) (*ControlPlane, error) {
	etcdBin, apiBin, kcmBin, err := controlPlaneBinaries()
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: opts.Dir, out: opts.Out, opts: opts}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "globaldns-controlplane-"); err != nil {
			return nil, fmt.Errorf("make control plane dir: %w", err)
		}
		cp.ownsDir = true
	} else if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("make control plane dir: %w", err)
	}
	tokens := opts.ExtraTokens
	if opts.CoreDNSUser != nil {
		tokens = append(slices.Clip(tokens), *opts.CoreDNSUser)
	}
	if err := cp.writeAuthFiles(tokens); err != nil {
		cp.Stop()
		return nil, err
	}
	// A port picked as free may be taken before the child binds it; such a
	// clash is retried with fresh ports.
	if opts.Scheduler {
		if st, err := os.Stat(filepath.Join(filepath.Dir(kcmBin), "kube-scheduler")); err != nil || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%s has no executable kube-scheduler: run `make controlplane` (or `make test`), which builds it", filepath.Dir(kcmBin))
		}
	}
	for attempt := 1; ; attempt++ {
		err = cp.start(ctx, etcdBin, apiBin, kcmBin)
		if err == nil {
			return cp, nil
		}
		cp.stopProcesses()
		if !errors.Is(err, errPortInUse) || attempt == 3 {
			cp.Stop()
			return nil, err
		}
	}
}

// start makes one attempt at starting the three processes (four with a scheduler).
func (cp *ControlPlane) start(ctx context.Context, etcdBin, apiBin, kcmBin string) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	cp.apiPort = ports[2]
	if err := cp.startEtcd(ctx, etcdBin, ports[0], ports[1]); err != nil {
		return err
	}
	cp.apiBin, cp.apiArgs = apiBin, cp.apiServerArgs()
	api, err := cp.startAPIServer(ctx)
	if err != nil {
		return err
	}
	if err := cp.writeClients(); err != nil {
		return err
	}
	if err := waitFor(ctx, api, "default namespace", func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	return cp.startControllers(ctx, kcmBin)
}

// startEtcd starts etcd on the client and peer ports given, in a fresh data dir, and waits until
// it is healthy.
func (cp *ControlPlane) startEtcd(ctx context.Context, etcdBin string, clientPort, peerPort int) error {
	// A fresh etcd data dir per attempt: a half-started member can leave state behind.
	etcdData := filepath.Join(cp.Dir, "etcd-data")
	if err := os.RemoveAll(etcdData); err != nil {
		return fmt.Errorf("clean etcd data dir: %w", err)
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	cp.etcdURL = clientURL
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcd, err := startProcess("etcd", cp.Dir, cp.out, nil, etcdBin,
		"--data-dir="+etcdData,
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync",
	)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, etcd)
	if err := waitHTTP(ctx, etcd, clientURL+"/health", "", func(code int, body string) bool {
		return code == http.StatusOK && strings.Contains(body, `"health":"true"`)
	}); err != nil {
		return portClash(etcd, fmt.Errorf("etcd not healthy: %w", err))
	}
	return nil
}

// apiServerArgs are kube-apiserver's flags, on etcd at cp.etcdURL.
func (cp *ControlPlane) apiServerArgs() []string {
	return []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.apiPort),
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
		"--token-auth-file=" + filepath.Join(cp.Dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(cp.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(cp.Dir, "sa.key"),
		// Dual-stack service CIDR (IPv4 primary): Services stay IPv4 unless
		// they ask for IPv6, but tests can make IPv6 ClusterIPs (Linkerd
		// per-pod mirrors in an IPv6 cluster) and RequireDualStack Services,
		// which the endpointslice controller needs before it publishes IPv6
		// pod addresses. A side effect, as in any dual-stack cluster:
		// selector-less headless Services default to RequireDualStack
		// (CreateMirror pins its headless mirror to single-stack).
		// A /12 (the largest kube-apiserver allows) so that the scale bench's
		// 90,000 per-pod mirrors get ClusterIPs.
		"--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/108",
		// No kubelet mounts tokens; the ServiceAccount plugin would demand them.
		"--disable-admission-plugins=ServiceAccount",
		// The kubelets' API (logs, port-forward) at the Nodes' InternalIPs, as kubeadm configures
		// it: the Nodes' hostnames resolve nowhere here (Kubelet.Serve).
		"--kubelet-preferred-address-types=InternalIP,Hostname",
	}
}

// startControllers starts kube-controller-manager, waits until it is ready, and starts
// kube-scheduler (beside kcmBin) when the options ask for one.
func (cp *ControlPlane) startControllers(ctx context.Context, kcmBin string) error {
	kcm, err := startProcess("kube-controller-manager", cp.Dir, cp.out, nil, kcmBin,
		"--kubeconfig="+cp.Kubeconfig,
		"--controllers="+strings.Join(append([]string{"endpointslice", "endpointslicemirroring", "garbagecollector", "namespace"}, cp.opts.Controllers...), ","),
		"--leader-elect=false",
		"--secure-port=0",
		// The default client limits (20 queries/s, bursts of 30) would turn
		// a burst of 1,000 Endpoints writes (Linkerd marking every per-pod
		// mirror of a linked cluster not ready) into 50 s of mirroring, and
		// every latency measured here into a token bucket's. Large clusters
		// raise them the same way.
		"--kube-api-qps=1000",
		"--kube-api-burst=1000",
	)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, kcm)
	if err := cp.waitControllerManager(ctx, kcm); err != nil || !cp.opts.Scheduler {
		return err
	}
	// No readiness to wait for (no port served): a test waits for its pods to be bound.
	sched, err := startProcess("kube-scheduler", cp.Dir, cp.out, nil, filepath.Join(filepath.Dir(kcmBin), "kube-scheduler"),
		"--kubeconfig="+cp.Kubeconfig, "--leader-elect=false", "--secure-port=0")
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, sched)
	return nil
}

// startAPIServer starts kube-apiserver with cp.apiArgs and waits until it is ready.
func (cp *ControlPlane) startAPIServer(ctx context.Context) (*process, error) {
	api, err := startProcess("kube-apiserver", cp.Dir, cp.out, nil, cp.apiBin, cp.apiArgs...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, api)
	if err := waitHTTP(ctx, api, cp.APIServerURL()+"/readyz", cp.adminToken, func(code int, body string) bool {
		return code == http.StatusOK && strings.TrimSpace(body) == "ok"
	}); err != nil {
		return nil, portClash(api, fmt.Errorf("kube-apiserver not ready: %w", err))
	}
	return api, nil
}

// StopAPIServer stops kube-apiserver (SIGKILL, as an outage would), leaving etcd and
// kube-controller-manager running. StartAPIServer brings it back on the same address.
func (cp *ControlPlane) StopAPIServer() {
	for i, p := range cp.procs {
		if p.name == "kube-apiserver" {
			p.kill()
			cp.procs = append(cp.procs[:i:i], cp.procs[i+1:]...)
			return
		}
	}
}

// StartAPIServer restarts kube-apiserver after StopAPIServer and waits until it is ready.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	_, err := cp.startAPIServer(ctx)
	return err
}

// CompactEtcd compacts etcd's history up to its current revision, as kube-apiserver's own
// compactor does every --etcd-compaction-interval, 5 minutes by default (kubernetes
// staging/src/k8s.io/apiserver/pkg/storage/etcd3/compact.go), and returns that revision. A watch resumed from an older
// resourceVersion by a fresh kube-apiserver (whose watch cache starts at the current revision)
// is then refused as "too old resource version", and its client must relist. It speaks etcd's
// gRPC gateway (JSON over HTTP), which etcd serves on the client URL by default.
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	var rng struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	if err := cp.etcdCall(ctx, "/v3/kv/range", `{"key":"AA=="}`, &rng); err != nil {
		return 0, err
	}
	rev := rng.Header.Revision
	if rev == 0 {
		return 0, fmt.Errorf("etcd: no revision in the range response")
	}
	body := fmt.Sprintf(`{"revision":"%d","physical":true}`, rev)
	return rev, cp.etcdCall(ctx, "/v3/kv/compaction", body, nil)
}

func (cp *ControlPlane) etcdCall(ctx context.Context, path, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.etcdURL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s %s %v", path, resp.Status, data, err)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// waitControllerManager returns once kube-controller-manager's controllers
// demonstrably run. The `kubernetes` Service's EndpointSlice is written by
// the apiserver itself, so it proves nothing; instead a selector-less probe
// Service with v1 Endpoints is created in `default`, and the wait is for the
// endpointslicemirroring controller to mirror it into an EndpointSlice. The
// probe is then deleted and the wait goes on until its slice is gone too,
// so tests start from a clean cluster.
func (cp *ControlPlane) waitControllerManager(ctx context.Context, kcm *process) error {
	const probe = "harness-kcm-probe"
	ns := metav1.NamespaceDefault
	c := cp.Client.CoreV1()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: probe},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: 1, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := c.Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create controller-manager probe service: %w", err)
	}
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: probe},
		Subsets: []corev1.EndpointSubset{{
			// TEST-NET-1: never contacted, and Endpoints reject loopback.
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.1"}},
			Ports:     []corev1.EndpointPort{{Name: "p", Port: 1, Protocol: corev1.ProtocolTCP}},
		}},
	}
	if _, err := c.Endpoints(ns).Create(ctx, ep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create controller-manager probe endpoints: %w", err)
	}
	probeSlices := func(ctx context.Context) ([]discoveryv1.EndpointSlice, error) {
		l, err := cp.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + probe})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	if err := waitFor(ctx, kcm, "kube-controller-manager to mirror a probe EndpointSlice", func(ctx context.Context) (bool, error) {
		s, err := probeSlices(ctx)
		return err == nil && len(s) > 0, nil
	}); err != nil {
		return err
	}
	if err := c.Endpoints(ns).Delete(ctx, probe, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete controller-manager probe endpoints: %w", err)
	}
	if err := c.Services(ns).Delete(ctx, probe, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete controller-manager probe service: %w", err)
	}
	return waitFor(ctx, kcm, "kube-controller-manager to delete the probe EndpointSlice", func(ctx context.Context) (bool, error) {
		s, err := probeSlices(ctx)
		return err == nil && len(s) == 0, nil
	})
}

// CPUTime returns the CPU time (user and system) each running control-plane process has used so
// far, by name (etcd, kube-apiserver, kube-controller-manager), read from /proc.
func (cp *ControlPlane) CPUTime() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range cp.procs {
		if d, ok := p.cpuTime(); ok {
			out[p.name] = d
		}
	}
	return out
}

// APIServerURL returns https://127.0.0.1:PORT.
func (cp *ControlPlane) APIServerURL() string {
	return "https://" + cp.APIServerAddr()
}

// APIServerAddr is the API server's host:port.
func (cp *ControlPlane) APIServerAddr() string { return "127.0.0.1:" + strconv.Itoa(cp.apiPort) }

// Stop stops kube-controller-manager, kube-apiserver and etcd in that order
// (SIGTERM, SIGKILL after 5 s) and removes Dir if StartControlPlane made it.
// It is idempotent.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		cp.stopProcesses()
		if cp.ownsDir {
			_ = os.RemoveAll(cp.Dir)
		}
	})
}

// stopProcesses stops the started processes in reverse start order.
func (cp *ControlPlane) stopProcesses() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].terminate(5 * time.Second)
	}
	cp.procs = nil
}
