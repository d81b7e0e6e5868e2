package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestHARollout rolls values-ha.yaml's Deployment out for real: kube-controller-manager's
// deployment and replicaset controllers and kube-scheduler, on exactly as many Nodes as replicas,
// with the required one-per-node anti-affinity, the PodDisruptionBudget and the PriorityClass
// rendered; the test plays the kubelets (bound pods turn Running and Ready, terminating ones
// finish). A change of the pod template must roll out completely. With the surge the chart had
// before (maxSurge 1, maxUnavailable 0), the same change cannot: the surge pod is unschedulable.
func TestHARollout(t *testing.T) {
	t.Parallel()
	own := harness.StartWith(t, harness.Options{Controllers: []string{"deployment", "replicaset"}, Scheduler: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := own.Client
	const ns, name = "coredns-global", "coredns-global"
	testkit.Must(t, harness.EnsureNamespace(ctx, c, ns))

	text, objs := helmTemplate(t, helms(t)["helm4"], "--values", chartPath(t, "values-ha.yaml"))
	replicas := int(*as[appsv1.Deployment](t, objs["Deployment/"+name]).Spec.Replicas)
	for i := range replicas {
		testkit.Must(t, createSchedulableNode(ctx, c, fmt.Sprintf("node-%d", i), []string{"us-east-1a", "us-east-1b"}[i%2]))
	}
	harness.RunKubectl(t, own, text, "apply", "-f", "-", "--server-side", "--namespace", ns)
	go playKubelets(ctx, t, c, ns)
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"kube-scheduler", "kube-controller-manager"} {
				b, _ := os.ReadFile(filepath.Join(own.Dir, name+".log"))
				t.Logf("the end of %s.log:\n%s", name, b[max(0, len(b)-3000):])
			}
		}
	})

	harness.EventuallyLong(t, "the first rollout", rolledOut(ctx, c, ns, name, replicas))
	onNodes := func() error {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if nodes[p.Spec.NodeName] {
				return fmt.Errorf("two replicas on %s", p.Spec.NodeName)
			}
			nodes[p.Spec.NodeName] = p.Spec.NodeName != ""
		}
		return nil
	}
	testkit.Must(t, onNodes())

	// A Corefile change (the checksum annotation) or an image change: a new pod template.
	for i := 1; i <= 2; i++ {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"checksum/corefile":"change-%d"}}}}}`, i)
		_, err := c.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		testkit.Must(t, err)
		harness.EventuallyLong(t, fmt.Sprintf("rollout %d", i), rolledOut(ctx, c, ns, name, replicas))
		testkit.Must(t, onNodes())
	}

	// The strategy it replaced waits for a node without a replica, which never comes.
	surge := `{"spec":{"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}},"template":{"metadata":{"annotations":{"checksum/corefile":"surge"}}}}}`
	_, err := c.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(surge), metav1.PatchOptions{})
	testkit.Must(t, err)
	harness.EventuallyLong(t, "the surge pod found unschedulable", func() error {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					return nil
				}
			}
		}
		return fmt.Errorf("no unschedulable pod among %d", len(pods.Items))
	})
	if err := rolledOut(ctx, c, ns, name, replicas)(); err == nil {
		t.Errorf("with maxSurge 1, maxUnavailable 0 on %d nodes the rollout completed", replicas)
	}
}

// createSchedulableNode creates a Ready Node with room for a few pods, as a kubelet registers it
// (kubernetes pkg/kubelet/kubelet_node_status.go initialNode, then its status updates),
// without the not-ready taint the API server's TaintNodesByCondition admission gives a new Node: the
// node lifecycle controller takes it off a Ready Node (that controller is not run here: it would
// taint these Nodes, whose kubelets send no heartbeats, unreachable).
func createSchedulableNode(ctx context.Context, c kubernetes.Interface, name, zone string) error {
	if err := harness.CreateNode(ctx, c, harness.Node{Name: name, Zone: zone, Region: "us-east-1"}); err != nil {
		return err
	}
	node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	if node, err = c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	return err
}

// playKubelets does, until ctx ends, what the kubelets would: a pod bound to a Node starts and
// turns ready; a terminating pod's containers stop and the pod is deleted.
func playKubelets(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string) {
	ip := 0
	for ctx.Err() == nil {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			switch {
			case p.DeletionTimestamp != nil:
				err = c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}})
			case p.Spec.NodeName != "" && p.Status.Phase != corev1.PodRunning:
				ip++
				harness.SetPodStatus(p, harness.Pod{IP: "10.244.9." + strconv.Itoa(ip%250+1), Ready: true})
				_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
				t.Logf("kubelet: %s: %v", p.Name, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rolledOut reports whether the Deployment's latest template runs on all its replicas and
// nothing else, as `kubectl rollout status` decides it.
func rolledOut(ctx context.Context, c kubernetes.Interface, ns, name string, replicas int) func() error {
	return func() error {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || int(s.UpdatedReplicas) != replicas || int(s.Replicas) != replicas || int(s.AvailableReplicas) != replicas {
			var pods []string
			if l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
				for _, p := range l.Items {
					pod := fmt.Sprintf("%s@%s:%s", p.Name, p.Spec.NodeName, p.Status.Phase)
					for _, cond := range p.Status.Conditions {
						if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue {
							pod += " (" + cond.Message + ")"
						}
					}
					pods = append(pods, pod)
				}
			}
			return fmt.Errorf("generation %d observed %d, replicas %d updated %d available %d; pods %s",
				d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, strings.Join(pods, " "))
		}
		return nil
	}
}
