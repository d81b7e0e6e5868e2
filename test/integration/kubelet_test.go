package integration

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// kubelet plays the kubelets of a control plane's Nodes for the pods of one namespace, with real
// processes: a pod bound to a Node runs as the coredns binary its image names, with the Corefile of
// the ConfigMap it mounts (as the kubelet mounts it when the pod starts), its container's
// environment and its ServiceAccount's token, and turns Running, and Ready once /ready says 200; a
// terminating pod gets SIGTERM, turns not ready, and is deleted once its process has exited (after
// the Corefile's lameduck), as a kubelet reports it gone. The pool, when set, sends queries to the
// pods' processes as a Service would (its own readiness probes decide which).
//
// Its state changes only in sync, which the test's goroutine calls (until): StartCoreDNS may fail
// the test, which only that goroutine may do.
type kubelet struct {
	t      *testing.T
	cp     *harness.ControlPlane
	ns     string
	images map[string]string // image reference -> the coredns binary it holds
	pool   *pool
	procs  map[types.UID]*podProcess
	nextIP int
}

// podProcess is a pod's running coredns.
type podProcess struct {
	pod, image, binary string
	c                  *harness.CoreDNS
	stopping           bool
}

func newKubelet(t *testing.T, cp *harness.ControlPlane, ns string, images map[string]string) *kubelet {
	return &kubelet{t: t, cp: cp, ns: ns, images: images, procs: map[types.UID]*podProcess{}}
}

// until syncs the pods until done says nil, within a generous deadline for a rollout.
func (k *kubelet) until(what string, done func() error) {
	k.t.Helper()
	deadline := time.Now().Add(patience + 3*time.Minute)
	for {
		err := k.sync()
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

// sync does, once, what the kubelets would for every pod of the namespace.
func (k *kubelet) sync() error {
	ctx := context.Background()
	pods, err := k.cp.Client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		pp := k.procs[p.UID]
		switch {
		case p.DeletionTimestamp != nil && pp == nil:
			err = k.remove(ctx, p)
		case p.DeletionTimestamp != nil && !pp.stopping:
			pp.stopping = true
			if err = pp.c.Signal(syscall.SIGTERM); err == nil {
				err = k.setStatus(ctx, p, false)
			}
		case p.DeletionTimestamp != nil && pp.c.Exited():
			if k.pool != nil {
				k.pool.remove(pp.c)
			}
			delete(k.procs, p.UID)
			err = k.remove(ctx, p)
		case p.DeletionTimestamp == nil && p.Spec.NodeName != "" && pp == nil:
			err = k.start(ctx, p)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// start runs pod p's container and reports it Running and Ready.
func (k *kubelet) start(ctx context.Context, p *corev1.Pod) error {
	ctr := p.Spec.Containers[0]
	bin, ok := k.images[ctr.Image]
	if !ok {
		return fmt.Errorf("no binary for image %s (ErrImagePull)", ctr.Image)
	}
	cmName := ""
	for _, v := range p.Spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm, err := k.cp.Client.CoreV1().ConfigMaps(k.ns).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	env := podEnv(k.ns, kubeconfigOf(k.t, k.cp, k.ns, p.Spec.ServiceAccountName), ctr)
	c := harness.StartCoreDNS(k.t, nil, localize(cm.Data["Corefile"], repoPath(k.t)), harness.WithEnv(env...), harness.WithBinary(bin))
	k.procs[p.UID] = &podProcess{pod: p.Name, image: ctr.Image, binary: bin, c: c}
	if k.pool != nil {
		k.pool.add(c)
	}
	k.nextIP++
	harness.SetPodStatus(p, harness.Pod{IP: "10.244.9." + strconv.Itoa(k.nextIP%250+1), Ready: true})
	_, err = k.cp.Client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// setStatus reports p ready or not, at the IP it has.
func (k *kubelet) setStatus(ctx context.Context, p *corev1.Pod, ready bool) error {
	harness.SetPodStatus(p, harness.Pod{IP: p.Status.PodIP, Ready: ready})
	_, err := k.cp.Client.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// remove deletes terminated pod p, as its kubelet does once its containers have stopped.
func (k *kubelet) remove(ctx context.Context, p *corev1.Pod) error {
	return k.cp.Client.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}})
}

// running are the processes of the pods not terminating.
func (k *kubelet) running() []*podProcess {
	var out []*podProcess
	for _, pp := range k.procs {
		if !pp.stopping {
			out = append(out, pp)
		}
	}
	return out
}
