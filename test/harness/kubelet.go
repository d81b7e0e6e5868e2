package harness

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Kubelet plays the kubelets of a control plane's Nodes for the pods of one namespace, with real
// processes: a pod bound to a Node runs as Run starts it, and turns Running, and Ready; a process
// that exits while its pod is not terminating is started again, its restartCount counted (as
// restartPolicy Always); a terminating pod gets SIGTERM, turns not ready, and is deleted once its
// process has exited (after the Corefile's lameduck), as a kubelet reports it gone. Serve adds the
// kubelets' API: logs and port-forwards. It follows the kubelet of the pinned
// Kubernetes (k8s.io/kubernetes v1.37.1): pkg/kubelet/kuberuntime/kuberuntime_container.go
// killContainer (SIGTERM, the grace period), pkg/kubelet/status/status_manager.go syncPod (the
// status written, and a terminated pod deleted with grace period 0 and its UID as precondition).
//
// Its state changes only in Sync, which the test's goroutine calls (Until): Run may fail the test,
// which only that goroutine may do.
type Kubelet struct {
	t  *testing.T
	cp *ControlPlane
	ns string
	// run starts pod p's container: an error for an image it has no binary of (ErrImagePull).
	run func(p *corev1.Pod) (*CoreDNS, error)
	// Started and Exited, when set, are told of each process once it started and once it exited,
	// as a Service's endpoints would follow them.
	Started, Exited func(*CoreDNS)
	mu              sync.Mutex // procs, which Serve's handlers read
	procs           map[types.UID]*PodProcess
	nextIP          int
}

// PodProcess is a pod's running process.
type PodProcess struct {
	Pod, Image string
	C          *CoreDNS
	// Previous is the process before the last restart (kubectl logs --previous), Restarts their count.
	Previous *CoreDNS
	Restarts int32
	spec     corev1.PodSpec // the pod's ports, for port-forwards
	stopping bool
}

// NewKubelet plays the kubelets of namespace ns of cp, starting each pod's container with run.
func NewKubelet(t *testing.T, cp *ControlPlane, ns string, run func(p *corev1.Pod) (*CoreDNS, error)) *Kubelet {
	return &Kubelet{t: t, cp: cp, ns: ns, run: run, procs: map[types.UID]*PodProcess{}}
}

// Until syncs the pods until done says nil, within a generous deadline for a rollout.
func (k *Kubelet) Until(what string, done func() error) {
	k.t.Helper()
	deadline := time.Now().Add(Patience + 3*time.Minute)
	for {
		err := k.Sync()
		if err == nil {
			err = done()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Sync does, once, what the kubelets would for every pod of the namespace.
func (k *Kubelet) Sync() error {
	ctx := context.Background()
	pods, err := k.cp.Client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range pods.Items {
		p := &pods.Items[i]
		pp := k.procs[p.UID]
		switch {
		case p.DeletionTimestamp != nil && pp == nil:
			err = k.remove(ctx, p)
		case p.DeletionTimestamp != nil && !pp.stopping:
			pp.stopping = true
			if err = pp.C.Signal(syscall.SIGTERM); err == nil {
				err = k.setStatus(ctx, p, false)
			}
		case p.DeletionTimestamp != nil && pp.C.Exited():
			if k.Exited != nil {
				k.Exited(pp.C)
			}
			delete(k.procs, p.UID)
			err = k.remove(ctx, p)
		case p.DeletionTimestamp == nil && p.Spec.NodeName != "" && pp == nil:
			err = k.start(ctx, p)
		case p.DeletionTimestamp == nil && pp != nil && pp.C.Exited():
			err = k.restart(ctx, p, pp)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// start runs pod p's container and reports it Running and Ready.
func (k *Kubelet) start(ctx context.Context, p *corev1.Pod) error {
	c, err := k.run(p)
	if err != nil {
		return err
	}
	pp := &PodProcess{Pod: p.Name, Image: p.Spec.Containers[0].Image, C: c, spec: p.Spec}
	k.procs[p.UID] = pp
	if k.Started != nil {
		k.Started(c)
	}
	k.nextIP++
	SetPodStatus(p, Pod{IP: "10.244.9." + strconv.Itoa(k.nextIP%250+1), Ready: true})
	p.Status.ContainerStatuses = pp.containerStatuses()
	_, err = k.cp.Client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// restart runs the container of pod p again after its process exited, as the kubelet does under
// restartPolicy Always (without its back-off: the tests restart a process on purpose).
func (k *Kubelet) restart(ctx context.Context, p *corev1.Pod, pp *PodProcess) error {
	if k.Exited != nil {
		k.Exited(pp.C)
	}
	c, err := k.run(p)
	if err != nil {
		return err
	}
	pp.Previous, pp.C = pp.C, c
	pp.Restarts++
	if k.Started != nil {
		k.Started(c)
	}
	p.Status.ContainerStatuses = pp.containerStatuses()
	_, err = k.cp.Client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// containerStatuses is the status of the pod's one container, running since now.
func (pp *PodProcess) containerStatuses() []corev1.ContainerStatus {
	return []corev1.ContainerStatus{{Name: pp.spec.Containers[0].Name, Image: pp.Image, Ready: true, Started: new(true), RestartCount: pp.Restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
}

// setStatus reports p ready or not, at the IP it has.
func (k *Kubelet) setStatus(ctx context.Context, p *corev1.Pod, ready bool) error {
	SetPodStatus(p, Pod{IP: p.Status.PodIP, Ready: ready})
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = ready
	}
	_, err := k.cp.Client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// remove deletes terminated pod p, as its kubelet does once its containers have stopped.
func (k *Kubelet) remove(ctx context.Context, p *corev1.Pod) error {
	return k.cp.Client.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}})
}

// Running are the processes of the pods not terminating.
func (k *Kubelet) Running() []*PodProcess {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*PodProcess
	for _, pp := range k.procs {
		if !pp.stopping {
			out = append(out, pp)
		}
	}
	return out
}

// Processes are the processes of every pod, terminating ones too.
func (k *Kubelet) Processes() []*PodProcess {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*PodProcess, 0, len(k.procs))
	for _, pp := range k.procs {
		out = append(out, pp)
	}
	return out
}
