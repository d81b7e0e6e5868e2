// Package telemetry holds what every part of the plugin reports through, under its name
// (contract.Name): the plugin's logger and its coredns_global_* Prometheus metrics.
package telemetry

import (
	"strconv"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Plugin is the plugin's name: its Corefile directive, log prefix and metrics subsystem.
const Plugin = contract.Name

// Log is the plugin's logger.
var Log = clog.NewWithPlugin(Plugin)

var (
	// Services is the number of global services in the index.
	Services = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "services",
		Help:      "Number of global services in the index.",
	})
	// Records is the number of records, per member cluster and state.
	Records = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "records",
		Help:      "Number of records in the index, per member cluster and state (ready, not_ready, terminating, gateway_down).",
	}, []string{"cluster", "state"})
	// RecordsWithoutPodMirror counts mirror records that have no per-pod mirror, or none with a slice yet, to tell their gateway's liveness.
	RecordsWithoutPodMirror = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "records_without_pod_mirror",
		Help:      "Mirror records with no per-pod mirror Service of their address, or none with an EndpointSlice yet, whose readiness is the headless mirror's alone, per member cluster.",
	}, []string{"cluster"})
	// ClusterDown is 1 for a linked cluster whose records are all left out because its gateway is down.
	ClusterDown = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "cluster_down",
		Help:      "1 while no record of a member cluster is ready and some are left out because Linkerd's gateway probe of that cluster fails.",
	}, []string{"cluster"})
	// ClusterUnnamed is 1 while mirrors exist and the Corefile does not name this cluster.
	ClusterUnnamed = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "cluster_unnamed",
		Help:      "1 while mirrors from linked clusters exist and the Corefile leaves `cluster` at its default.",
	})
	// LinksUnreadable is 1 while the API serves Linkerd's Links but they may not be read.
	LinksUnreadable = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "links_unreadable",
		Help:      "1 while the API serves Linkerd's Links but this replica may not read them: no linked cluster's mirror is answered.",
	})
	// ProgrammingDuration is the time from a watch event to the index snapshot that reflects it.
	ProgrammingDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace:                   plugin.Namespace,
		Subsystem:                   Plugin,
		Name:                        "programming_duration_seconds",
		Help:                        "Time from a Service or EndpointSlice event to the published index that answers it.",
		Buckets:                     []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
	})
	// Synced is 1 once the index answers from the state of the first sync with the API server.
	Synced = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "synced",
		Help:      "1 once the index holds what the API server had at the first sync (until then, names answer SERVFAIL), else 0.",
	})
	// UnpublishedChange tells a stuck publisher from a quiet mesh: the index publishes only on change.
	UnpublishedChange = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "unpublished_change_timestamp_seconds",
		Help:      "Unix time of the oldest Kubernetes event not yet in the published index that DNS answers from; 0 when every event is published.",
	})
	// Answers counts answers with records by the tier of their nearest record: whether clients
	// reach the nearest peers.
	Answers = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "answers_total",
		Help:      "Answers with A, AAAA or SRV records, by the tier of their nearest record (0 this cluster, then one per topology key, most specific first, then the rest).",
	}, []string{"tier"})
	// FailoverAnswers counts answers under a `nearest` policy that skipped a nearer tier.
	FailoverAnswers = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "failover_answers_total",
		Help:      "Answers for a service under a nearest policy that skipped a nearer tier with a member but no ready record of the type asked.",
	})
	// Skipped counts Kubernetes objects, or parts of them, that were skipped or handled specially, by reason.
	Skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "skipped_total",
		Help:      "Malformed or surprising Kubernetes objects (or parts of them) skipped or handled specially, by reason.",
	}, []string{"reason"})
	// ObjectsWithProblems counts the objects whose problems Skipped counted, while they last.
	ObjectsWithProblems = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "objects_with_problems",
		Help:      "Services and EndpointSlices watched now that have a problem counted in skipped_total, by kind.",
	}, []string{"kind"})
)

// answerTiers are the default topology's tiers (this cluster, zone, region, the rest), bound once:
// counting an answer costs an atomic add, not a label lookup.
var answerTiers = func() (c [4]prometheus.Counter) {
	for i := range c {
		c[i] = Answers.WithLabelValues(strconv.Itoa(i))
	}
	return c
}()

// Answered counts an answer whose nearest record is in tier t.
func Answered(t uint8) {
	if int(t) < len(answerTiers) {
		answerTiers[t].Inc()
		return
	}
	Answers.WithLabelValues(strconv.Itoa(int(t))).Inc()
}

// The EndpointSlice writer's metrics.
var (
	// Leader is 1 while this instance holds the writer's Lease.
	Leader = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "leader",
		Help:      "1 while this instance holds the EndpointSlice writer's Lease, else 0.",
	})
	// EndpointSliceChanges counts API writes of global Services and EndpointSlices.
	EndpointSliceChanges = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "endpointslice_changes_total",
		Help:      "API writes of global Services and EndpointSlices, by operation (create, update, delete).",
	}, []string{"operation"})
	// WriterSyncs counts reconciliations of one global service, by result.
	WriterSyncs = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "writer_syncs_total",
		Help:      "Reconciliations of one global service's Service and EndpointSlices, by result (success, error, stale, conflict).",
	}, []string{"result"})
	// WriterSliceSyncs tells how a big service's slices are kept written: from its changes, or
	// (first, and whenever something else moved) from its whole state.
	WriterSliceSyncs = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "writer_slice_syncs_total",
		Help:      "Syncs of one global service's EndpointSlices (its -global or its MCS ones), by what they were made from: changes (since the last sync of a big service) or whole (the service's whole state).",
	}, []string{"from"})
	// WriterSyncDuration is how long one reconciliation takes.
	WriterSyncDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace:                   plugin.Namespace,
		Subsystem:                   Plugin,
		Name:                        "writer_sync_duration_seconds",
		Help:                        "Time to reconcile one global service's Service and EndpointSlices.",
		Buckets:                     []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
	})
	// ServiceImportsUnavailable is 1 while `serviceimports on` writes nothing: the ServiceImport
	// CRD is not installed.
	ServiceImportsUnavailable = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "writer_serviceimports_unavailable",
		Help:      "1 while serviceimports on cannot write ServiceImports: the serviceimports.multicluster.x-k8s.io CRD is not installed.",
	})
	// WriterOwnerMissing is 1 while the writer's `owner` cannot be read, and nothing is written.
	WriterOwnerMissing = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "writer_owner_missing",
		Help:      "1 while the object the owner option names cannot be read (missing or forbidden): no Service or ServiceImport is created or updated.",
	})
	// WriterConflicts is the number of global services whose Service or EndpointSlice name is taken
	// by an object the plugin does not manage.
	WriterConflicts = promauto.NewGauge(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "writer_conflicts",
		Help:      "Global services whose Service or EndpointSlice name is taken by an object this plugin does not manage.",
	})
)
