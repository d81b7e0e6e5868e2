package harness

// What Linkerd's service mirror writes per remote pod and for the gateway: the per-pod mirrors of
// a headless mirror (linkerd2 multicluster/service-mirror/cluster_watcher_headless.go), their
// liveness, and ClusterIP and remote-discovery mirrors (cluster_watcher.go).

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// createPodMirror creates the per-pod "endpoint mirror" Service of hostname
// and its Endpoints to the gateway, and records its ClusterIP in objs
// (linkerd2 multicluster/service-mirror/cluster_watcher_headless.go
// createEndpointMirrorService).
func createPodMirror(ctx context.Context, c kubernetes.Interface, m Mirror, hostname string, objs *MirrorObjects) error {
	name := MirroredName(hostname, m.Cluster)
	labels := mirrorLabels(m.Cluster, m.Labels)
	labels[LabelHeadlessMirrorSvcName] = MirroredName(m.Service, m.Cluster)
	fq := hostname + "." + fqName(m.Service, m.Namespace)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: labels, Annotations: map[string]string{
			AnnotationRemoteResourceVersion: remoteResourceVersion,
			AnnotationRemoteSvcFqName:       fq,
		}},
		Spec: corev1.ServiceSpec{Ports: servicePorts(m.Ports)},
	}
	gateway := GatewayIP
	if m.IPv6 {
		single := corev1.IPFamilyPolicySingleStack
		svc.Spec.IPFamilyPolicy = &single
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		gateway = GatewayIPv6
	}
	created, err := c.CoreV1().Services(m.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create endpoint mirror service %s/%s: %w", m.Namespace, name, err)
	}
	annotations := m.identity()
	annotations[AnnotationRemoteSvcFqName] = fq
	epLabels := maps.Clone(labels)
	if m.HoldPodSlices {
		epLabels[discoveryv1.LabelSkipMirror] = "true"
	}
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: epLabels, Annotations: annotations},
		Subsets:    []corev1.EndpointSubset{gatewaySubset([]corev1.EndpointAddress{{IP: gateway}}, gatewayPorts(m.Ports), !m.GatewayDown)},
	}
	if _, err := c.CoreV1().Endpoints(m.Namespace).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create endpoint mirror endpoints %s/%s: %w", m.Namespace, name, err)
	}
	objs.PodServices[hostname] = name
	objs.ClusterIPs[hostname] = created.Spec.ClusterIP
	return nil
}

// ReleasePodSlices lets kube-controller-manager mirror the per-pod mirrors of objs that a Mirror
// with HoldPodSlices created: their Endpoints lose the skip-mirror label.
func ReleasePodSlices(ctx context.Context, c kubernetes.Interface, objs *MirrorObjects) error {
	patch := []byte(`{"metadata":{"labels":{"` + discoveryv1.LabelSkipMirror + `":null}}}`)
	for _, name := range objs.PodServices {
		if _, err := c.CoreV1().Endpoints(objs.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("release endpoint mirror endpoints %s/%s: %w", objs.Namespace, name, err)
		}
	}
	return nil
}

// gatewaySubset is a subset of addrs, in addresses while the gateway is
// alive and in notReadyAddresses while it is not (linkerd2
// multicluster/service-mirror/cluster_watcher.go updateReadiness).
func gatewaySubset(addrs []corev1.EndpointAddress, ports []corev1.EndpointPort, alive bool) corev1.EndpointSubset {
	if alive {
		return corev1.EndpointSubset{Addresses: addrs, Ports: ports}
	}
	return corev1.EndpointSubset{NotReadyAddresses: addrs, Ports: ports}
}

// SetGateway does what Linkerd's service mirror does when its probe of
// cluster's gateway changes state (linkerd2 multicluster/service-mirror/
// cluster_watcher.go repairEndpoints): every mirror Service of that cluster,
// in every namespace, except headless mirrors (whose Endpoints point at the
// per-pod mirrors) and remote-discovery mirrors (which have none), gets its
// Endpoints rewritten with the gateway addresses, ready while the gateway is
// alive and not ready while it is not. The probe's own Endpoints are never
// marked not ready (createOrUpdateGatewayEndpoints), so they are not touched.
// It returns how many Endpoints it rewrote.
func SetGateway(ctx context.Context, c kubernetes.Interface, cluster string, alive bool) (int, error) {
	return SetGatewayIn(ctx, c, metav1.NamespaceAll, cluster, alive, nil)
}

// SetGatewayIn is SetGateway limited to one namespace ("" for all), so that tests sharing a
// control plane stay apart, calling written (when not nil) after each Endpoints write.
func SetGatewayIn(ctx context.Context, c kubernetes.Interface, namespace, cluster string, alive bool, written func(*corev1.Service)) (int, error) {
	svcs, err := c.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: LabelMirroredService + "=true," + LabelClusterName + "=" + cluster,
	})
	if err != nil {
		return 0, fmt.Errorf("list mirrors of %s: %w", cluster, err)
	}
	n := 0
	for _, svc := range svcs.Items {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Labels[LabelRemoteDiscovery] != "" {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ep, err := c.CoreV1().Endpoints(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var addrs []corev1.EndpointAddress
			var ports []corev1.EndpointPort
			for _, s := range ep.Subsets {
				addrs = append(append(addrs, s.Addresses...), s.NotReadyAddresses...)
				ports = s.Ports
			}
			ep.Subsets = []corev1.EndpointSubset{gatewaySubset(addrs, ports, alive)}
			_, err = c.CoreV1().Endpoints(svc.Namespace).Update(ctx, ep, metav1.UpdateOptions{})
			return err
		})
		if apierrors.IsNotFound(err) {
			continue // deleted meanwhile, as Linkerd would find it
		}
		if err != nil {
			return n, fmt.Errorf("set gateway of %s alive=%t on %s/%s: %w", cluster, alive, svc.Namespace, svc.Name, err)
		}
		if written != nil {
			written(&svc)
		}
		n++
	}
	return n, nil
}

// DeletePodMirror deletes the per-pod mirror of hostname (Service and
// Endpoints) and leaves the headless mirror as it is: the moment before
// Linkerd creates a per-pod mirror, or a mirror version without them.
func DeletePodMirror(ctx context.Context, c kubernetes.Interface, namespace, hostname, cluster string) error {
	return deleteServiceAndEndpoints(ctx, c, namespace, MirroredName(hostname, cluster))
}

// podMirrors returns the per-pod Services of headless mirror name, by name.
func podMirrors(ctx context.Context, c kubernetes.Interface, namespace, name string) (map[string]corev1.Service, error) {
	l, err := c.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelHeadlessMirrorSvcName + "=" + name})
	if err != nil {
		return nil, fmt.Errorf("list endpoint mirrors of %s/%s: %w", namespace, name, err)
	}
	out := map[string]corev1.Service{}
	for _, s := range l.Items {
		out[s.Name] = s
	}
	return out, nil
}

// deleteServiceAndEndpoints deletes Service and Endpoints name, if present.
func deleteServiceAndEndpoints(ctx context.Context, c kubernetes.Interface, namespace, name string) error {
	if err := c.CoreV1().Services(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s/%s: %w", namespace, name, err)
	}
	if err := c.CoreV1().Endpoints(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete endpoints %s/%s: %w", namespace, name, err)
	}
	return nil
}

// CreateClusterIPMirror creates Linkerd's mirror of a non-headless remote
// service: ClusterIP Service <svc>-<cluster> and Endpoints to the gateway
// (linkerd2 multicluster/service-mirror/cluster_watcher.go).
// It must never become a global service.
func CreateClusterIPMirror(ctx context.Context, c kubernetes.Interface, namespace, service, cluster string, ports []Port) error {
	name := MirroredName(service, cluster)
	labels := mirrorLabels(cluster, nil)
	if err := createClusterIPMirrorService(ctx, c, "clusterIP", namespace, service, name, labels, ports); err != nil {
		return err
	}
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, Annotations: map[string]string{
			AnnotationRemoteSvcFqName:       fqName(service, namespace),
			AnnotationRemoteGatewayIdentity: GatewayIdentity,
		}},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: GatewayIP}}, Ports: gatewayPorts(ports)}},
	}
	if _, err := c.CoreV1().Endpoints(namespace).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create clusterIP mirror endpoints %s/%s: %w", namespace, name, err)
	}
	return nil
}

// CreateRemoteDiscoveryMirror creates Linkerd's (>= 2.14) remote-discovery
// mirror: ClusterIP Service <svc>-<cluster> with labels remote-discovery
// and remote-service, and no Endpoints (linkerd2
// multicluster/service-mirror/cluster_watcher.go; the labels,
// pkg/k8s/labels.go). It must never become a global
// service.
func CreateRemoteDiscoveryMirror(ctx context.Context, c kubernetes.Interface, namespace, service, cluster string, ports []Port) error {
	name := MirroredName(service, cluster)
	labels := mirrorLabels(cluster, nil)
	labels[LabelRemoteDiscovery] = cluster
	labels[LabelRemoteService] = service
	return createClusterIPMirrorService(ctx, c, "remote-discovery", namespace, service, name, labels, ports)
}

// createClusterIPMirrorService creates the ClusterIP Service `name` mirroring remote `service`.
func createClusterIPMirrorService(ctx context.Context, c kubernetes.Interface, kind, namespace, service, name string, labels map[string]string, ports []Port) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, Annotations: map[string]string{
			AnnotationRemoteSvcFqName:       fqName(service, namespace),
			AnnotationRemoteResourceVersion: remoteResourceVersion,
		}},
		Spec: corev1.ServiceSpec{Ports: servicePorts(ports)},
	}
	if _, err := c.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create %s mirror service %s/%s: %w", kind, namespace, name, err)
	}
	return nil
}

// Pod is a StatefulSet pod; Name is also its hostname (e.g. foo-0).
type Pod struct {
	Name, Node string
	IP         string
	IPv6       string // optional second (dual-stack) pod IP
	Ready      bool
}

// StatefulSet describes a local StatefulSet: its headless Service and pods.
// No StatefulSet object is made; nothing here needs one.
type StatefulSet struct {
	Namespace, Service string // headless Service with selector app=<Service>
	Ports              []Port
	Pods               []Pod
	NotExported        bool              // leave out mirror.linkerd.io/exported=true
	IPFamilies         []corev1.IPFamily // optional; two families make it RequireDualStack
}
