package writer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/globaldns/global/plugin/global/telemetry"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// With `owner RESOURCE NAME`, the Services and ServiceImports the writer creates carry an owner
// reference to that cluster-scoped object of the release (the chart's write ClusterRole), so that
// deleting the release has the garbage collector delete them, and their EndpointSlices with them
// (those are owned by their Service or ServiceImport). No controller and no blockOwnerDeletion
// flag: setting either needs the right to update the owner's finalizers. Only objects the writer
// creates ever get the reference; nothing else is touched.

// GCOwner is the object named by `owner`.
type GCOwner struct {
	Resource string // one of contract.OwnerResources
	Name     string
}

// ownerKind is a cluster-scoped resource that may own the written objects, and how to read one.
type ownerKind struct {
	apiVersion, kind string
	get              func(ctx context.Context, c kubernetes.Interface, name string) (metav1.Object, error)
}

// ownerKinds are how to read each of the resources `owner` takes (contract.OwnerResources).
var ownerKinds = map[string]ownerKind{
	"clusterroles.rbac.authorization.k8s.io": {"rbac.authorization.k8s.io/v1", "ClusterRole",
		func(ctx context.Context, c kubernetes.Interface, name string) (metav1.Object, error) {
			return c.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
		}},
	"clusterrolebindings.rbac.authorization.k8s.io": {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding",
		func(ctx context.Context, c kubernetes.Interface, name string) (metav1.Object, error) {
			return c.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
		}},
	"namespaces": {"v1", "Namespace",
		func(ctx context.Context, c kubernetes.Interface, name string) (metav1.Object, error) {
			return c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		}},
	"priorityclasses.scheduling.k8s.io": {"scheduling.k8s.io/v1", "PriorityClass",
		func(ctx context.Context, c kubernetes.Interface, name string) (metav1.Object, error) {
			return c.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
		}},
}

// ownerRefresh is how long a read of the owner is used: a deleted and recreated owner (a new UID)
// is seen within it. One GET per interval, whatever the number of writes.
const ownerRefresh = 10 * time.Second

// errOwnerMissing: the owner cannot be read (not created yet, deleted, or not readable); nothing
// is created or updated until it can, so no object gets a reference that is already dangling.
var errOwnerMissing = errors.New("the owner cannot be read")

// ownerRefs reads the owner, at most once per ownerRefresh. The zero value is ready to use.
type ownerRefs struct {
	mu      sync.Mutex
	refs    []metav1.OwnerReference
	err     error
	fetched time.Time
	logged  string // the state last logged, so each is logged once
}

// references returns the owner references of the objects we create: none without `owner`, or
// errOwnerMissing (wrapped) while the owner cannot be read.
func (o *ownerRefs) references(ctx context.Context, c kubernetes.Interface, owner *GCOwner) ([]metav1.OwnerReference, error) {
	if owner == nil {
		return nil, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.fetched.IsZero() && time.Since(o.fetched) < ownerRefresh {
		return o.refs, o.err
	}
	k, ok := ownerKinds[owner.Resource]
	if !ok { // the Corefile's parse refuses it; a Config made otherwise
		return nil, fmt.Errorf("%w: %s is not a resource owner takes", errOwnerMissing, owner.Resource)
	}
	obj, err := k.get(ctx, c, owner.Name)
	if err != nil && ctx.Err() != nil {
		return nil, err // the term ended: say nothing, keep nothing
	}
	o.fetched = time.Now()
	o.refs, o.err = nil, nil
	if err != nil {
		o.err = fmt.Errorf("%w: %s %s: %w", errOwnerMissing, k.kind, owner.Name, err)
		o.report("missing: "+string(apierrors.ReasonForError(err)), true, "writer: owner %s %s cannot be read, so nothing is created or updated until it can "+
			"(checked again every %v): %v", k.kind, owner.Name, ownerRefresh, err)
		return nil, o.err
	}
	o.refs = []metav1.OwnerReference{{APIVersion: k.apiVersion, Kind: k.kind, Name: obj.GetName(), UID: obj.GetUID()}}
	o.report("found: "+string(obj.GetUID()), false, "writer: owner %s %s (uid %s): the Services and ServiceImports written are deleted with it", k.kind, owner.Name, obj.GetUID())
	return o.refs, nil
}

// report sets the metric and logs the owner's state when it changed: missing as a warning, found
// (a new UID too) as information.
func (o *ownerRefs) report(state string, missing bool, format string, args ...any) {
	telemetry.WriterOwnerMissing.Set(map[bool]float64{false: 0, true: 1}[missing])
	if state == o.logged {
		return
	}
	o.logged = state
	if missing {
		telemetry.Log.Warningf(format, args...)
	} else {
		telemetry.Log.Infof(format, args...)
	}
}

// ownedBy sets refs on an object we create or update (a copy: every object gets the same ones);
// without `owner` (refs nil) it leaves the object's references as they are.
func ownedBy(m *metav1.ObjectMeta, refs []metav1.OwnerReference) {
	if refs != nil {
		m.OwnerReferences = slices.Clone(refs)
	}
}

// ownersUpToDate reports whether have's references are the desired ones (any, without `owner`).
func ownersUpToDate(have, want []metav1.OwnerReference) bool {
	return want == nil || apiequality.Semantic.DeepEqual(have, want)
}
