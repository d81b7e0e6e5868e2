package writer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/telemetry"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Election configures the Lease that decides which replica writes.
type Election struct {
	Namespace, Name string
	Duration        time.Duration // how long a lease lasts without renewal
	RenewDeadline   time.Duration // how long the leader keeps trying to renew before it stops
	RetryPeriod     time.Duration
}

// Defaults, as client-go's and kube-controller-manager's (the Lease's name and duration are the
// contract's: contract.DefaultLeaseName, contract.DefaultLeaseDuration).
const (
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// DefaultLeaseNamespace is the pod's namespace (POD_NAMESPACE, else the ServiceAccount's), or
// "default" outside a pod.
func DefaultLeaseNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b))
	}
	return metav1.NamespaceDefault
}

// Identity is a unique candidate name: hostname_<random>. A Corefile reload briefly runs two
// instances in one process, so the hostname alone is not enough.
func Identity() string {
	host, _ := os.Hostname()
	b := make([]byte, 8)
	rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

// Campaign runs for the Lease until ctx is done: each time it is acquired, lead runs until it is
// lost; then it campaigns again. Only the writer waits on the lease; DNS never does. With
// ReleaseOnCancel the lease is handed back when ctx ends, for a fast handover: stop writing
// (Writer.Close) before cancelling ctx. observe, if not nil, is told each leader's identity.
func Campaign(ctx context.Context, client kubernetes.Interface, e Election, identity string, lead func(context.Context), observe func(leader string)) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.Duration,
			RenewDeadline:   e.RenewDeadline,
			RetryPeriod:     e.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            telemetry.Plugin,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					telemetry.Leader.Set(1)
					telemetry.Log.Infof("writer: %s leads (lease %s/%s)", identity, e.Namespace, e.Name)
					lead(ctx)
				},
				OnStoppedLeading: func() { telemetry.Leader.Set(0) },
				OnNewLeader:      observe,
			},
		})
		if err != nil { // the Corefile's timings were checked at parse time
			telemetry.Log.Errorf("writer: leader election: %v", err)
			return
		}
		le.Run(ctx)
	}
}

// CheckTimings reports whether the lease timings work together, as client-go requires.
func (e Election) CheckTimings() bool {
	return e.Duration > e.RenewDeadline && float64(e.RenewDeadline) > leaderelection.JitterFactor*float64(e.RetryPeriod) && e.RetryPeriod > 0
}
