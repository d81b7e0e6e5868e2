package harness

// The local cluster's objects the tests make: Nodes, StatefulSets' Pods and their readiness,
// namespaces, and waits on the EndpointSlices the controllers write of them.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Node is a cluster node with topology labels, and optionally the InternalIP addresses and pod
// CIDRs a kubelet and the node IPAM controller would give it.
type Node struct {
	Name, Zone, Region string
	Addresses          []string
	PodCIDRs           []string
}

// CreateNode creates a Node with the zone, region and hostname labels and a
// Ready condition (written through the status subresource), as a kubelet
// registers its node (kubernetes pkg/kubelet/kubelet_node_status.go).
func CreateNode(ctx context.Context, c kubernetes.Interface, n Node) error {
	labels := map[string]string{corev1.LabelHostname: n.Name}
	if n.Zone != "" {
		labels[corev1.LabelTopologyZone] = n.Zone
	}
	if n.Region != "" {
		labels[corev1.LabelTopologyRegion] = n.Region
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels}, Spec: corev1.NodeSpec{PodCIDRs: n.PodCIDRs}}
	if len(n.PodCIDRs) > 0 {
		node.Spec.PodCIDR = n.PodCIDRs[0]
	}
	node, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "harness node", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	for _, a := range n.Addresses {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update node %s status: %w", n.Name, err)
	}
	return nil
}

// CreateStatefulSet creates the headless Service and the pods, with the
// StatefulSet controller's identities, then writes each pod's status as a
// kubelet would (phase Running, podIP(s), conditions): CreatePod and
// SetPodStatus name the upstream code they follow.
// The endpointslice controller then publishes them. The pods' nodes must
// exist (CreateNode) or the controller leaves the pods out.
func CreateStatefulSet(ctx context.Context, c kubernetes.Interface, s StatefulSet) error {
	selector := map[string]string{"app": s.Service}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Service, Namespace: s.Namespace},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selector,
			Ports:     servicePorts(s.Ports),
		},
	}
	if !s.NotExported {
		svc.Labels = map[string]string{LabelExported: "true"}
	}
	if len(s.IPFamilies) > 0 {
		policy := corev1.IPFamilyPolicySingleStack
		if len(s.IPFamilies) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		svc.Spec.IPFamilyPolicy = &policy
		svc.Spec.IPFamilies = s.IPFamilies
	}
	if _, err := c.CoreV1().Services(s.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s/%s: %w", s.Namespace, s.Service, err)
	}
	for _, p := range s.Pods {
		if err := CreatePod(ctx, c, s, p); err != nil {
			return err
		}
	}
	return nil
}

// CreatePod creates one more pod of StatefulSet s (whose Service exists) with the identity the
// StatefulSet controller gives it (kubernetes pkg/controller/statefulset/stateful_set_utils.go
// initIdentity: hostname the pod's name, subdomain the governing Service), and writes its
// status as a kubelet would (SetPodStatus). Only s's Namespace, Service and Ports are read.
func CreatePod(ctx context.Context, c kubernetes.Interface, s StatefulSet, p Pod) error {
	var containerPorts []corev1.ContainerPort
	for _, p := range s.Ports {
		containerPorts = append(containerPorts, corev1.ContainerPort{Name: p.Name, ContainerPort: p.target(), Protocol: p.protocol()})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: s.Namespace, Labels: map[string]string{"app": s.Service}},
		Spec: corev1.PodSpec{
			NodeName:  p.Node,
			Hostname:  p.Name,
			Subdomain: s.Service,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.invalid/app:test", // never pulled: no kubelet
				Ports: containerPorts,
			}},
		},
	}
	created, err := c.CoreV1().Pods(s.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", s.Namespace, p.Name, err)
	}
	SetPodStatus(created, p)
	if _, err := c.CoreV1().Pods(s.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update pod %s/%s status: %w", s.Namespace, p.Name, err)
	}
	return nil
}

// DeletePod deletes a pod at once (grace period 0), as the kubelet's status manager does once
// the pod's containers are gone (kubernetes pkg/kubelet/status/status_manager.go syncPod): no
// kubelet runs here to end a graceful deletion.
func DeletePod(ctx context.Context, c kubernetes.Interface, namespace, pod string) error {
	err := c.CoreV1().Pods(namespace).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, pod, err)
	}
	return nil
}

// SetPodStatus writes the status a kubelet reports for a running pod at p's addresses, ready as
// p says (kubernetes
// pkg/kubelet/kubelet_pods.go generateAPIPodStatus; the conditions of
// pkg/kubelet/status/generate.go).
func SetPodStatus(pod *corev1.Pod, p Pod) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &now
	pod.Status.PodIP = p.IP
	pod.Status.PodIPs = []corev1.PodIP{{IP: p.IP}}
	if p.IPv6 != "" {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: p.IPv6})
	}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	setReady(pod, p.Ready)
}

// setReady sets the Ready and ContainersReady conditions of pod.
func setReady(pod *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		found := false
		for i := range pod.Status.Conditions {
			if cond := &pod.Status.Conditions[i]; cond.Type == t {
				found = true
				if cond.Status != status {
					cond.Status, cond.LastTransitionTime = status, now
				}
			}
		}
		if !found {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
		}
	}
}

// SetPodReady sets a pod's Ready and ContainersReady conditions through the
// status subresource, as the kubelet's status manager writes them when a
// readiness probe changes (kubernetes pkg/kubelet/status/status_manager.go
// SetContainerReadiness, syncPod).
func SetPodReady(ctx context.Context, c kubernetes.Interface, namespace, pod string, ready bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		setReady(p, ready)
		_, err = c.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set pod %s/%s ready=%t: %w", namespace, pod, ready, err)
	}
	return nil
}

// EnsureNamespace creates namespace name unless it exists.
func EnsureNamespace(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// WaitForSlices polls (every 100 ms) the EndpointSlices labelled
// kubernetes.io/service-name=<service> in namespace until cond accepts them
// or ctx ends; the error then describes the slices last seen.
func WaitForSlices(ctx context.Context, c kubernetes.Interface, namespace, service string, cond func([]discoveryv1.EndpointSlice) bool) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last []discoveryv1.EndpointSlice
	var lastErr error
	for {
		l, err := c.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err == nil {
			last, lastErr = l.Items, nil
			if cond(l.Items) {
				return nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("waiting for EndpointSlices of %s/%s: %v; last seen: %s", namespace, service, ctx.Err(), DescribeSlices(last))
			if lastErr != nil {
				msg += "; last error: " + lastErr.Error()
			}
			return errors.New(msg)
		case <-tick.C:
		}
	}
}

// DescribeSlices renders slices compactly for test failure messages.
func DescribeSlices(slices []discoveryv1.EndpointSlice) string {
	if len(slices) == 0 {
		return "no slices"
	}
	var parts []string
	for _, s := range slices {
		var eps []string
		for _, e := range s.Endpoints {
			d := strings.Join(e.Addresses, ",")
			if e.Hostname != nil {
				d = *e.Hostname + "=" + d
			}
			if e.Conditions.Ready != nil {
				d += " ready=" + strconv.FormatBool(*e.Conditions.Ready)
			}
			if e.NodeName != nil {
				d += " node=" + *e.NodeName
			}
			if e.Zone != nil {
				d += " zone=" + *e.Zone
			}
			eps = append(eps, d)
		}
		var ports []string
		for _, p := range s.Ports {
			if p.Port != nil {
				name := ""
				if p.Name != nil {
					name = *p.Name
				}
				ports = append(ports, name+":"+strconv.Itoa(int(*p.Port)))
			}
		}
		var labels []string
		for k, v := range s.Labels {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		parts = append(parts, fmt.Sprintf("%s(%s) [%s] ports [%s] labels {%s}", s.Name, s.AddressType,
			strings.Join(eps, "; "), strings.Join(ports, ","), strings.Join(labels, ",")))
	}
	return strings.Join(parts, " | ")
}
