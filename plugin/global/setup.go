package global

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/plugin/global/writer"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/plugin"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

func init() {
	plugin.Register(telemetry.Plugin, setup)
	// CoreDNS refuses every class but IN unless a plugin of the server block is listed here; the
	// explanations are CH TXT. ServeDNS refuses other classes itself (and CH with explain off).
	dnsserver.EnableChaos[telemetry.Plugin] = struct{}{}
}

func setup(c *caddy.Controller) error {
	telemetry.RouteKlog()
	g, err := parseGlobal(c)
	if err != nil {
		return plugin.Error(telemetry.Plugin, err)
	}
	if err := g.build(); err != nil {
		return plugin.Error(telemetry.Plugin, err)
	}
	c.OnStartup(func() error { g.NSAddrs = boundAddrs(dnsserver.GetConfig(c).ListenHosts); return nil })
	c.OnStartup(g.OnStartup)
	c.OnShutdown(g.OnShutdown)
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		g.Next = next
		return g
	})
	return nil
}

// build connects the plugin, as parsed, to the API: clients, watchers, index and (unless
// `endpointslices off`) the writer. Nothing runs yet.
func (g *Global) build() error {
	rc, err := g.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if g.watcher, err = watch.New(client, g.Namespaces, g.exportSelector); err != nil {
		return err
	}
	if g.topology, err = g.topologyWatch(rc, client); err != nil {
		return err
	}
	g.corefile.Locality, g.corefile.Keys, g.corefile.ClientKeys = g.Localities, g.Topology, g.ClientTopology
	g.Index = index.New(&g.corefile, g.watcher)
	g.Replica = g.replica
	g.Asker = answer.Asker{Sources: g.ClientLocality, ECSFrom: g.ECSNetworks}
	if g.ClientLocality.Any() {
		g.clients = watch.NewClients(client, nodeKeys(g.ClientTopology), g.ClientLocality.Pod, g.Forwarders, g.ECSServices)
		g.Locator = g.clients
	}
	lease := g.lease()
	g.writerConfig.Owner = writer.Owner(lease.Namespace, lease.Name)
	if !g.Writer {
		g.leftovers = func(ctx context.Context) { writer.Leftovers(ctx, client, g.Namespaces, g.writerConfig.Owner) }
		return nil
	}
	g.writerConfig.ServiceImports = g.ServiceImports
	if g.Owner[0] != "" {
		g.writerConfig.GCOwner = &writer.GCOwner{Resource: g.Owner[0], Name: g.Owner[1]}
	}
	return g.buildWriter(rc)
}

// nodeKeys are the Node labels a client's place is made of: its topology keys but its node's name
// and its cluster.
func nodeKeys(keys []string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == index.HostnameKey || k == index.ClusterKey })
}

// topologyWatch watches what the cluster's objects say of the topology.
func (g *Global) topologyWatch(rc *rest.Config, client *kubernetes.Clientset) (*watch.Topology, error) {
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return watch.NewTopology(dyn, meta, client.Discovery(), g.Topology, g.LinksNamespace), nil
}

// buildWriter builds the EndpointSlice writer and the client of its lease.
func (g *Global) buildWriter(rc *rest.Config) error {
	// The writer (its writes, its Events, the informers on its own objects) has a client of its
	// own, so a token bucket of its own at the same rate: a large first sync queues a write per
	// object, and the watches' lists must not wait behind them.
	wrc := rest.CopyConfig(rc)
	wrc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst) // shared with its ServiceImport client
	wclient, err := kubernetes.NewForConfig(wrc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	// ServiceImports are custom resources: JSON only. The client exists with serviceimports off
	// too, to delete what was written while it was on.
	mrc := rest.CopyConfig(wrc)
	mrc.ContentType = "application/json"
	mclient, err := mcsclient.NewForConfig(mrc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	// So has the lease, whose requests time out: a renewal or release that hangs must not keep a
	// replica that lost the lease writing. It is not rate-limited: the elector makes one request
	// at a time, at most two per lease_retry_period, and a renewal that waited on a low
	// apiserver_qps would lose the lease.
	erc := rest.CopyConfig(rc)
	erc.Timeout = g.election.RetryPeriod
	erc.QPS = -1
	if g.electionClient, err = kubernetes.NewForConfig(erc); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	g.writer = writer.New(wclient, mclient, g.Index, g.Namespaces, g.writerConfig)
	return nil
}

func (g *Global) restConfig() (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	path := g.kubeconfig
	if path == "" {
		// In a pod, the pod's ServiceAccount; outside one, $KUBECONFIG, as kubectl would.
		if rc, err = rest.InClusterConfig(); err != nil {
			if path = os.Getenv("KUBECONFIG"); path == "" {
				return nil, fmt.Errorf("no kubeconfig given, KUBECONFIG unset, and not running in a Kubernetes pod: %w", err)
			}
		}
	}
	if path != "" {
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
			&clientcmd.ConfigOverrides{CurrentContext: g.kubeContext})
		if rc, err = loader.ClientConfig(); err != nil {
			return nil, fmt.Errorf("%skubeconfig %s: %w", g.kubeconfigAt, path, err)
		}
	}
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.QPS, rc.Burst = g.apiQPS, g.apiBurst
	rc.UserAgent = fmt.Sprintf("coredns-%s/%s git_commit:%s", telemetry.Plugin, coremain.CoreVersion, coremain.GitCommit)
	return rc, nil
}

// boundAddrs returns the non-loopback addresses the server listens on (every interface address
// when it listens on all): what ns1.dns.<zone> answers with.
func boundAddrs(hosts []string) []netip.Addr {
	if len(hosts) == 0 || hosts[0] == "" {
		hosts = nil
		ifaddrs, err := net.InterfaceAddrs()
		if err != nil {
			return nil
		}
		for _, a := range ifaddrs {
			hosts = append(hosts, a.String())
		}
	}
	var out []netip.Addr
	for _, h := range hosts {
		a, err := netip.ParseAddr(h)
		if err != nil {
			p, perr := netip.ParsePrefix(h)
			if perr != nil {
				continue
			}
			a = p.Addr()
		}
		if a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a.Unmap())
	}
	return out
}
