// Package global is a CoreDNS plugin that answers <svc>.<ns>.global with the union of a local
// headless Service and every Linkerd multicluster mirror of it, ordered by topology tier.
//
// The shape: watch (reflectors) -> index (global services, immutable snapshots) -> dns (this
// package: names in, records out).
package global

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/plugin/global/writer"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	"k8s.io/client-go/kubernetes"
)

var log = telemetry.Log

// Global is the plugin: the DNS handler over an index fed by a watcher, answering with the answer
// path (package answer). It is also the plugin's configuration: stanza.Read (config.go) reads the
// Corefile's zones and the contract's options into Zones and Options, and each of the plugin's own
// options into its field here or, for one that shapes answers, the Answerer's; nothing else writes
// them, and build (setup.go) connects the plugin to the API from them (and gives the Answerer its
// index, the asker's sources and locator, and the replica's state).
type Global struct {
	Next plugin.Handler

	// The Corefile's options: the zones, the contract's, then one field, or one struct its
	// consumer reads, per option of the plugin's own.
	Zones            []string        // the zone arguments, or else the server block's (global. for the root)
	contract.Options                 // the options the outside depends on (contract/options.go)
	exportSelector   string          // export_selector
	corefile         index.Topology  // cluster, and (build) locality, topology: the index completes it from the cluster
	answer.Answerer                  // how names answer: names, policy, prefer_namespaces, ttl, rotate, explain, explain_from
	Fall             fall.F          // fallthrough
	startupTimeout   time.Duration   // startup_timeout
	kubeconfig       string          // kubeconfig PATH [CONTEXT]
	kubeContext      string          // kubeconfig's CONTEXT
	kubeconfigAt     string          // "file:line - " of the kubeconfig option, for errors found when reading it
	apiQPS           float32         // apiserver_qps
	apiBurst         int             // apiserver_burst
	writerConfig     writer.Config   // endpointslice_size, service_suffix; build adds serviceimports and owner
	election         writer.Election // lease_renew_deadline, lease_retry_period (lease has the rest)

	// What build and OnStartup make of them (and the Answerer's Index, Locator and NSAddrs).
	watcher  *watch.Watcher
	topology *watch.Topology // what the cluster's objects say of the topology
	clients  *watch.Clients  // with client_locality: where clients run
	warned   map[string]bool // the topology's disagreements with the Corefile, as last logged

	// The EndpointSlice writer, nil with `endpointslices off`, and the client of the Lease that gates it.
	writer         *writer.Writer
	electionClient kubernetes.Interface
	identity       string                 // this replica's in the election
	leader         atomic.Pointer[string] // the writer's last known leader
	// With `endpointslices off`: reports what an earlier writer left (writer.Leftovers).
	leftovers func(context.Context)

	// mu guards cancel and campaign: a SIGTERM runs OnShutdown while OnStartup may still be waiting.
	mu       sync.Mutex
	cancel   context.CancelFunc // stops the watcher, the index and the writer's informers
	campaign context.CancelFunc // ends the campaign for the lease, releasing it
	wg       sync.WaitGroup
}

// Name implements plugin.Handler.
func (g *Global) Name() string { return telemetry.Plugin }

// Ready implements ready.Readiness: the index holds what the API had at the initial sync.
func (g *Global) Ready() bool { return g.Index.Ready() }

// OnStartup starts the watcher, the index publisher and (unless `endpointslices off`) the writer's
// informers and its campaign for the lease; it waits, up to startupTimeout, for the first sync, so
// a freshly started server rarely answers SERVFAIL.
func (g *Global) OnStartup() error {
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.cancel = cancel
	g.mu.Unlock()
	// The topology first, briefly: the services are then built once, with it.
	known := make(chan struct{})
	first := sync.OnceFunc(func() { close(known) })
	g.wg.Add(3)
	go func() {
		defer g.wg.Done()
		g.topology.Run(ctx, topologyWait, func(d index.Discovered) { g.discovered(d); first() })
	}()
	<-known
	go func() { defer g.wg.Done(); g.Index.Run(ctx) }()
	go func() {
		defer g.wg.Done()
		if err := g.watcher.Run(ctx, g.Index); err != nil {
			log.Errorf("watch: %v", err)
		}
	}()
	clientsSynced := make(chan struct{})
	if g.clients != nil {
		g.wg.Add(1)
		go func() { defer g.wg.Done(); g.clients.Run(ctx, clientsSynced) }()
	} else {
		close(clientsSynced)
	}
	if g.leftovers != nil {
		g.wg.Add(1)
		go func() { defer g.wg.Done(); g.leftovers(ctx) }()
	}
	g.startWriter(ctx)
	if g.waitForSync(clientsSynced) {
		log.Infof("synced in %v: %d global services", time.Since(start).Round(time.Millisecond), g.Index.Snapshot().Len())
	}
	return nil
}

// lease is the writer's election: the contract's Lease, in the pod's namespace unless the
// Corefile names one (read only then: from the environment or the ServiceAccount's file), timed
// by leaseTimings.
func (g *Global) lease() writer.Election {
	e := g.leaseTimings()
	e.Namespace, e.Name = g.LeaseNamespace, g.LeaseName
	if e.Namespace == "" {
		e.Namespace = writer.DefaultLeaseNamespace()
	}
	return e
}

// leaseTimings is the election's timings alone: the contract's lease_duration and the plugin's
// own lease_renew_deadline and lease_retry_period, which must agree (check).
func (g *Global) leaseTimings() writer.Election {
	e := g.election
	e.Duration = g.LeaseDuration
	return e
}

// startWriter starts, unless `endpointslices off`, the writer's informers and its campaign for
// the lease.
func (g *Global) startWriter(ctx context.Context) {
	if g.writer == nil {
		return
	}
	g.identity = writer.Identity()
	g.writer.Start(ctx)
	campaign, stop := context.WithCancel(ctx)
	g.mu.Lock()
	g.campaign = stop
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		writer.Campaign(campaign, g.electionClient, g.lease(), g.identity, g.writer.Run,
			func(leader string) { g.leader.Store(&leader) })
	}()
}

// waitForSync waits, up to startupTimeout, for the index's first sync and, with client_locality,
// for the clients' Nodes and Pods (until then answers are the cluster's view); false when it
// gave up.
func (g *Global) waitForSync(clientsSynced <-chan struct{}) bool {
	deadline := time.NewTimer(g.startupTimeout)
	defer deadline.Stop()
	say := time.NewTicker(time.Second)
	defer say.Stop()
	indexSynced := g.Index.Synced()
	for indexSynced != nil || clientsSynced != nil {
		select {
		case <-indexSynced:
			indexSynced = nil
		case <-clientsSynced:
			clientsSynced = nil
		case <-say.C:
			log.Info("waiting for the Kubernetes API before starting the server")
		case <-deadline.C:
			if !g.Index.Ready() {
				log.Warningf("starting the server with an unsynced Kubernetes API: names in %v answer SERVFAIL until it syncs", g.Zones)
			} else {
				log.Warning("starting the server before the clients' Nodes and Pods are read: answers are the cluster's view until they are")
			}
			return false
		}
	}
	return true
}

// topologyWait bounds the wait for the topology's sources at startup.
const topologyWait = 2 * time.Second

// discovered gives the index the Corefile's topology completed by what the cluster's objects say,
// logging each disagreement with the Corefile once.
func (g *Global) discovered(d index.Discovered) {
	topo, warnings := g.corefile.With(d)
	seen := map[string]bool{}
	for _, w := range warnings {
		if !g.warned[w] {
			log.Warningf("topology: %s", w)
		}
		seen[w] = true
	}
	g.warned = seen
	g.Index.SetTopology(topo)
}

// OnShutdown stops everything OnStartup started and waits for it: on a Corefile reload the next
// instance is already running its own.
// OnStartup may not have got as far as the writer, or may not have started at all.
func (g *Global) OnShutdown() error {
	g.mu.Lock()
	cancel, campaign := g.cancel, g.campaign
	g.mu.Unlock()
	if g.writer != nil {
		// Stop writing before the lease is released: the next leader may start at once.
		g.writer.Close()
		if campaign != nil {
			campaign()
		}
	}
	if cancel != nil {
		cancel()
		g.wg.Wait()
	}
	return nil
}
