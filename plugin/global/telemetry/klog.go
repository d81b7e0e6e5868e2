package telemetry

import (
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// RouteKlog sends client-go's own logging (informers, leader election) through the plugin's
// logger instead of klog's stderr format, as the kubernetes plugin does for its client.
func RouteKlog() { klog.SetLogger(logr.New(klogSink{})) }

// klogSink is a logr.LogSink for klog's default verbosity only.
type klogSink struct{ kv []any }

func (klogSink) Init(logr.RuntimeInfo)          {}
func (klogSink) Enabled(level int) bool         { return level <= 0 }
func (s klogSink) WithName(string) logr.LogSink { return s }

func (s klogSink) WithValues(kv ...any) logr.LogSink {
	return klogSink{kv: append(s.kv[:len(s.kv):len(s.kv)], kv...)}
}

func (s klogSink) Info(_ int, msg string, kv ...any) { Log.Info("client-go: " + s.format(msg, kv)) }

func (s klogSink) Error(err error, msg string, kv ...any) {
	Log.Error("client-go: " + s.format(msg, append(kv, "err", err)))
}

func (s klogSink) format(msg string, kv []any) string {
	var b strings.Builder
	b.WriteString(msg)
	all := append(s.kv[:len(s.kv):len(s.kv)], kv...)
	for i := 0; i+1 < len(all); i += 2 {
		fmt.Fprintf(&b, " %v=%v", all[i], all[i+1])
	}
	return b.String()
}
