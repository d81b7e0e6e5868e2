package harness

import (
	"context"
	"fmt"
	"os"
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
	// RunJob, when set, starts the container of a pod that runs to completion (restartPolicy
	// Never: `helm test`'s); the pod then Succeeds or Fails by its exit status.
	RunJob func(p *corev1.Pod) (*Job, error)
	mu     sync.Mutex // procs, which Serve's handlers read
	procs  map[types.UID]*PodProcess
	nextIP int
}

// PodProcess is a pod's running process.
type PodProcess struct {
	Pod, Image string
	C          *CoreDNS
	// Previous is the process before the last restart (kubectl logs --previous), Restarts their count.
	Previous *CoreDNS
	Restarts int32
	// Job is the process of a pod that runs to completion (RunJob), C nil; done once reported.
	Job      *Job
	done     bool
	spec     corev1.PodSpec // the pod's ports, for port-forwards
	stopping bool
}

// Job is a process that runs to completion, as a pod's container under restartPolicy Never.
type Job struct{ proc *process }

// StartJob runs argv in dir with env added, its output kept for its pod's log; it is killed when
// the test ends.
func StartJob(t testing.TB, dir string, env []string, argv ...string) (*Job, error) {
	p, err := startProcess("job", dir, nil, env, argv[0], argv[1:]...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(p.kill)
	return &Job{proc: p}, nil
}

// Logs is the job's output so far.
func (j *Job) Logs() string {
	b, err := os.ReadFile(j.proc.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", j.proc.logPath, err)
	}
	return string(b)
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
	k.forget(pods.Items)
	for i := range pods.Items {
		p := &pods.Items[i]
		pp := k.procs[p.UID]
		if pp != nil && pp.Job != nil || pp == nil && p.Spec.RestartPolicy == corev1.RestartPolicyNever && k.RunJob != nil {
			if err := k.syncJob(ctx, p, pp); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("pod %s: %w", p.Name, err)
			}
			continue
		}
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

// forget kills the processes of pods gone from the API without this kubelet seeing them
// terminate (deleted with grace period 0: Helm's hook deletion, kubectl delete --force), as the
// kubelet kills the containers of pods it no longer has (pkg/kubelet/kubelet.go HandlePodRemoves).
func (k *Kubelet) forget(pods []corev1.Pod) {
	have := map[types.UID]bool{}
	for _, p := range pods {
		have[p.UID] = true
	}
	for uid, pp := range k.procs {
		if have[uid] {
			continue
		}
		delete(k.procs, uid)
		if pp.Job != nil {
			pp.Job.proc.kill()
			continue
		}
		pp.C.Kill()
		if k.Exited != nil {
			k.Exited(pp.C)
		}
	}
}

// syncJob does what the kubelet does for a pod that runs to completion: starts its container once,
// reports it Running, then Succeeded or Failed by its exit code (pkg/kubelet/kubelet_pods.go
// getPhase: restartPolicy Never, every container terminated); a deleted one is killed and removed.
func (k *Kubelet) syncJob(ctx context.Context, p *corev1.Pod, pp *PodProcess) error {
	switch {
	case p.DeletionTimestamp != nil:
		if pp != nil {
			pp.Job.proc.kill()
			delete(k.procs, p.UID)
		}
		return k.remove(ctx, p)
	case pp == nil && p.Spec.NodeName != "":
		job, err := k.RunJob(p)
		if err != nil {
			return err
		}
		k.procs[p.UID] = &PodProcess{Pod: p.Name, Image: p.Spec.Containers[0].Image, Job: job, spec: p.Spec}
		k.nextIP++
		SetPodStatus(p, Pod{IP: "10.244.9." + strconv.Itoa(k.nextIP%250+1)})
	case pp != nil && !pp.done && pp.Job.proc.exited():
		pp.done = true
		code := int32(pp.Job.proc.cmd.ProcessState.ExitCode())
		p.Status.Phase, p.Status.ContainerStatuses = corev1.PodSucceeded, []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: pp.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed", FinishedAt: metav1.Now()}}}}
		if code != 0 {
			p.Status.Phase, p.Status.ContainerStatuses[0].State.Terminated.Reason = corev1.PodFailed, "Error"
		}
		setReady(p, false)
	default:
		return nil
	}
	_, err := k.cp.Client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// restart runs the container of pod p again after its process exited, as the kubelet does under
// restartPolicy Always (pkg/kubelet/container/helpers.go ShouldContainerBeRestarted, from
// pkg/kubelet/kuberuntime/kuberuntime_manager.go computePodActions; without its back-off: the
// tests crash a process on purpose).
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

// Running are the processes of the pods not terminating (not jobs').
func (k *Kubelet) Running() []*PodProcess {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*PodProcess
	for _, pp := range k.procs {
		if !pp.stopping && pp.C != nil {
			out = append(out, pp)
		}
	}
	return out
}

// Processes are the processes of every pod, terminating ones too (not jobs').
func (k *Kubelet) Processes() []*PodProcess {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*PodProcess, 0, len(k.procs))
	for _, pp := range k.procs {
		if pp.C != nil {
			out = append(out, pp)
		}
	}
	return out
}
