package history

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/globaldns/global/test/harness"

	"k8s.io/client-go/dynamic"
)

// History is the world a seed plays in: what it made, so that it picks changes that apply.
type History struct {
	t     *testing.T
	cp    *harness.ControlPlane
	ctx   context.Context
	seed  int64
	rng   *rand.Rand
	log   []string
	ip    int // the last local pod address handed out
	proxy *harness.Proxy
	dyn   dynamic.Interface // Links

	corefile string
	viaProxy string
	mu       sync.Mutex          // replicas, for TestSoak's load
	replicas [2]*harness.CoreDNS // the second reaches the API server through proxy

	// TestSoak's: a step that does not converge is counted, not fatal; only replica 1 is
	// ever replaced, so that replica 0's growth is measured over the whole run.
	soak       bool
	changes    int
	mismatches []string

	namespaces []string // every namespace of the history, created or still to be
	live       []string // those that exist
	next       int      // index in namespaces of the next one to create
	seen       map[string]bool
	locals     map[string]*harness.StatefulSet // ns/svc -> the local StatefulSet and its live pods, as they are
	mirrors    map[string]*harness.Mirror      // ns/svc/cluster
	down       map[string]bool                 // cluster -> gateway down
	linked     map[string]bool                 // the clusters Links name
}

var (
	ports    = []harness.Port{{Name: "db", Port: 5432, TargetPort: 15432}}
	services = []string{"foo", "bar"}
	clusters = []string{"west", "north"}
)
