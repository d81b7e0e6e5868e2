// Package telemetry names the plugin and holds what every part of it reports through: the
// plugin's logger and its coredns_global_* Prometheus metrics.
package telemetry

import (
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Plugin is the plugin's name: its Corefile directive, log prefix and metrics subsystem.
const Plugin = "global"

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
	// Records is the number of ready records answered, per member cluster.
	Records = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "records",
		Help:      "Number of ready records in the index, per member cluster.",
	}, []string{"cluster"})
	// ProgrammingDuration is the time from a watch event to the index snapshot that reflects it.
	ProgrammingDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Namespace:                   plugin.Namespace,
		Subsystem:                   Plugin,
		Name:                        "programming_duration_seconds",
		Help:                        "Time from a Service or EndpointSlice event to the published index that answers it.",
		Buckets:                     []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		NativeHistogramBucketFactor: plugin.NativeHistogramBucketFactor,
	})
	// Skipped counts Kubernetes objects, or parts of them, that were skipped or handled specially, by reason.
	Skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: Plugin,
		Name:      "skipped_total",
		Help:      "Malformed or surprising Kubernetes objects (or parts of them) skipped or handled specially, by reason.",
	}, []string{"reason"})
)
