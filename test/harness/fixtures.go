package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Labels and annotations written by Linkerd's service mirror
// (linkerd2 pkg/k8s/labels.go).
const (
	LabelExported              = "mirror.linkerd.io/exported"
	LabelMirroredService       = "mirror.linkerd.io/mirrored-service"
	LabelClusterName           = "mirror.linkerd.io/cluster-name"
	LabelHeadlessMirrorSvcName = "mirror.linkerd.io/headless-mirror-svc-name"
	LabelRemoteDiscovery       = "multicluster.linkerd.io/remote-discovery"
	LabelRemoteService         = "multicluster.linkerd.io/remote-service"

	AnnotationRemoteSvcFqName       = "mirror.linkerd.io/remote-svc-fq-name"
	AnnotationRemoteResourceVersion = "mirror.linkerd.io/remote-resource-version"
	AnnotationRemoteGatewayIdentity = "mirror.linkerd.io/remote-gateway-identity"

	// svcMirrorPrefix marks labels Linkerd does not copy from remote services.
	svcMirrorPrefix = "mirror.linkerd.io/"
)

// The fake Linkerd gateway the per-pod and ClusterIP mirrors point at. The
// addresses are only written into Endpoints; nothing ever connects to them.
const (
	GatewayIP       = "172.31.255.1"
	GatewayIPv6     = "fd00:31:255::1"
	GatewayPort     = 4143
	GatewayIdentity = "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local"
)

// remoteResourceVersion stands in for the remote objects' resourceVersion
// that Linkerd records; any value will do, nothing compares it.
const remoteResourceVersion = "1"

// Port is a service port; TargetPort defaults to Port, Protocol to TCP.
type Port struct {
	Name             string
	Port, TargetPort int32
	Protocol         corev1.Protocol
}

func (p Port) target() int32 {
	if p.TargetPort == 0 {
		return p.Port
	}
	return p.TargetPort
}

func (p Port) protocol() corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}

// servicePorts returns the Service ports (Linkerd's remapRemoteServicePorts
// keeps name, protocol, port and targetPort).
func servicePorts(ports []Port) []corev1.ServicePort {
	out := make([]corev1.ServicePort, 0, len(ports))
	for _, p := range ports {
		out = append(out, corev1.ServicePort{Name: p.Name, Protocol: p.protocol(), Port: p.Port, TargetPort: intstr.FromInt32(p.target())})
	}
	return out
}

// gatewayPorts returns the Endpoints ports of a mirror pointing at the
// gateway: every service port, by name, on the gateway port.
func gatewayPorts(ports []Port) []corev1.EndpointPort {
	out := make([]corev1.EndpointPort, 0, len(ports))
	for _, p := range ports {
		out = append(out, corev1.EndpointPort{Name: p.Name, Protocol: p.protocol(), Port: GatewayPort})
	}
	return out
}

// RemoteEndpoint is a pod of the remote StatefulSet. Linkerd mirrors only ready remote pods
// (cluster_watcher_headless.go createOrUpdateHeadlessEndpoints reads the remote Endpoints'
// addresses, never its notReadyAddresses): one that is not ready has no per-pod mirror and is not
// in the headless mirror's Endpoints.
type RemoteEndpoint struct {
	Hostname string
	Ready    bool
}

// Mirror describes a headless service exported from a linked cluster.
type Mirror struct {
	Namespace, Service, Cluster string            // remote Service in Namespace; the Link's targetClusterName
	Ports                       []Port            // remote service ports (port and targetPort may differ)
	Endpoints                   []RemoteEndpoint  // remote StatefulSet pods
	Labels                      map[string]string // remote labels; Linkerd copies all but mirror.linkerd.io/*
	// Annotations are the remote Service's: Linkerd copies them onto the headless mirror Service
	// (cluster_watcher.go getMirrorServiceAnnotations, getCommonServiceAnnotations; all but the
	// topology-aware-hints ones and the Link's excludedAnnotations), not onto its Endpoints.
	Annotations map[string]string
	OmitFQName  bool // leave remote-svc-fq-name off the headless Service and Endpoints (old Linkerd, hostile tests)
	// GatewayIdentity is the Link's spec.gatewayIdentity, which Linkerd writes on the mirrors'
	// Endpoints when it is set (cluster_watcher_headless.go createHeadlessMirrorEndpoints,
	// createEndpointMirrorService): the package's GatewayIdentity when empty, none when "-".
	GatewayIdentity string
	// IPv6 makes the per-pod Services (and the headless mirror) single-stack
	// IPv6, so the headless mirror's addresses are IPv6 ClusterIPs, as
	// Linkerd produces in an IPv6 cluster. (Linkerd sets no IP family; the
	// harness cluster is dual-stack, IPv4 first.)
	IPv6 bool
	// GatewayDown is the service mirror's belief that the cluster's gateway
	// fails its probe (cluster_watcher.go getGatewayAlive) while it writes:
	// every Endpoints it then creates or updates through createMirrorEndpoints
	// or updateMirrorEndpoints has its addresses moved to notReadyAddresses
	// (updateReadiness). That is each per-pod mirror it creates, and, in
	// UpdateMirror, the headless mirror itself; CreateMirror creates the
	// headless mirror's Endpoints directly, ready (createHeadlessMirrorEndpoints).
	// SetGateway flips existing per-pod mirrors.
	GatewayDown bool
}

// MirroredName is the local name Linkerd gives remote name: <name>-<cluster>.
func MirroredName(name, cluster string) string { return name + "-" + cluster }

// MirrorObjects names what CreateMirror or UpdateMirror made.
type MirrorObjects struct {
	Namespace   string
	Service     string            // headless mirror Service and Endpoints, <svc>-<cluster>
	PodServices map[string]string // hostname -> per-pod Service (and Endpoints) <hostname>-<cluster>
	ClusterIPs  map[string]string // hostname -> ClusterIP of the per-pod Service
	// Written is when UpdateMirror sent the headless mirror's Endpoints update, the write that
	// changes what it lists (after the per-pod mirrors', as Linkerd orders them).
	Written time.Time
}

// mirrorLabels are the labels of Linkerd's mirror Services and Endpoints:
// the remote labels except mirror.linkerd.io/*, mirrored-service and
// cluster-name. (Linkerd before the Link v1alpha3 API put only the last two
// on the headless mirror's Endpoints and on the per-pod mirrors.)
func mirrorLabels(cluster string, remote map[string]string) map[string]string {
	l := map[string]string{}
	for k, v := range remote {
		if !strings.HasPrefix(k, svcMirrorPrefix) {
			l[k] = v
		}
	}
	l[LabelMirroredService] = "true"
	l[LabelClusterName] = cluster
	return l
}

// fqName is the remote-svc-fq-name of a remote service.
func fqName(service, namespace string) string {
	return service + "." + namespace + ".svc.cluster.local"
}

// CreateMirror creates what Linkerd's service mirror (with
// enableHeadlessServices) creates for an exported headless service, in
// Linkerd's order (linkerd2 multicluster/service-mirror/
// cluster_watcher_headless.go createRemoteHeadlessService,
// createEndpointMirrorService, createHeadlessMirrorEndpoints):
//   - the headless mirror Service <svc>-<cluster> (clusterIP None, no
//     selector, mirror labels, the remote Service's annotations and
//     remote-svc-fq-name and remote-resource-version, the remote service
//     ports);
//   - per endpoint, a ClusterIP "endpoint mirror" Service
//     <hostname>-<cluster> (plus label headless-mirror-svc-name, annotations
//     remote-resource-version and remote-svc-fq-name
//     <hostname>.<svc>.<ns>.svc.cluster.local) and its Endpoints pointing at
//     the gateway GatewayIP:GatewayPort;
//   - the headless mirror Endpoints <svc>-<cluster>: mirror labels,
//     annotations remote-svc-fq-name and remote-gateway-identity (which
//     kube-controller-manager's EndpointSliceMirroring copies onto its slices,
//     with the labels: endpointslicemirroring/utils.go newEndpointSlice), one subset
//     whose addresses are {hostname, ClusterIP of the per-pod Service} and
//     whose ports are the remote TARGET ports.
//
// The headless mirror's addresses are created ready: gateway liveness is on
// the per-pod mirrors (see SetGateway). Endpoints that are not ready are left
// out, as Linkerd mirrors only the remote Endpoints' ready addresses.
func CreateMirror(ctx context.Context, c kubernetes.Interface, m Mirror) (*MirrorObjects, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	name := MirroredName(m.Service, m.Cluster)
	labels := mirrorLabels(m.Cluster, m.Labels)
	annotations := m.serviceAnnotations()
	// Linkerd sets no IP family. In the dual-stack harness cluster the
	// apiserver would default a selector-less headless Service to
	// RequireDualStack, so the single-stack default of an IPv4 (or, with
	// IPv6, an IPv6) cluster is spelled out to get the same object.
	family := corev1.IPv4Protocol
	if m.IPv6 {
		family = corev1.IPv6Protocol
	}
	single := corev1.IPFamilyPolicySingleStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			ClusterIP:      corev1.ClusterIPNone,
			Ports:          servicePorts(m.Ports),
			IPFamilyPolicy: &single,
			IPFamilies:     []corev1.IPFamily{family},
		},
	}
	if _, err := c.CoreV1().Services(m.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create headless mirror service %s/%s: %w", m.Namespace, name, err)
	}
	objs := &MirrorObjects{Namespace: m.Namespace, Service: name, PodServices: map[string]string{}, ClusterIPs: map[string]string{}}
	for _, e := range m.mirrored() {
		if err := createPodMirror(ctx, c, m, e.Hostname, objs); err != nil {
			return nil, err
		}
	}
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: labels, Annotations: m.endpointsAnnotations()},
		Subsets:    m.subsets(objs, true),
	}
	if _, err := c.CoreV1().Endpoints(m.Namespace).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create headless mirror endpoints %s/%s: %w", m.Namespace, name, err)
	}
	return objs, nil
}

// UpdateMirror does to a mirror made by CreateMirror what Linkerd's service
// mirror does when the remote Endpoints of the exported service change, m
// being the remote state (cluster_watcher_headless.go
// createOrUpdateHeadlessEndpoints): a per-pod mirror is created for each
// newly ready remote endpoint (createEndpointMirrorService), those of
// endpoints no longer ready there are deleted (with their Endpoints: no
// endpoints controller runs here), and the headless mirror's Endpoints get
// the new subset through updateMirrorEndpoints, everything else of them kept.
// With m.GatewayDown, updateReadiness puts every address of the headless
// mirror in notReadyAddresses, where it stays until the next such update:
// repairEndpoints, which follows the gateway, skips headless mirrors
// (cluster_watcher.go). The headless Service is not touched: a change of the
// remote Service is another path.
func UpdateMirror(ctx context.Context, c kubernetes.Interface, m Mirror) (*MirrorObjects, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	name := MirroredName(m.Service, m.Cluster)
	objs := &MirrorObjects{Namespace: m.Namespace, Service: name, PodServices: map[string]string{}, ClusterIPs: map[string]string{}}
	existing, err := podMirrors(ctx, c, m.Namespace, name)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, e := range m.mirrored() {
		pod := MirroredName(e.Hostname, m.Cluster)
		want[pod] = true
		if s, ok := existing[pod]; ok {
			objs.PodServices[e.Hostname] = pod
			objs.ClusterIPs[e.Hostname] = s.Spec.ClusterIP
			continue
		}
		if err := createPodMirror(ctx, c, m, e.Hostname, objs); err != nil {
			return nil, err
		}
	}
	for pod := range existing {
		if !want[pod] {
			if err := deleteServiceAndEndpoints(ctx, c, m.Namespace, pod); err != nil {
				return nil, err
			}
		}
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ep, err := c.CoreV1().Endpoints(m.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ep.Subsets = m.subsets(objs, !m.GatewayDown)
		objs.Written = time.Now()
		_, err = c.CoreV1().Endpoints(m.Namespace).Update(ctx, ep, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("update headless mirror endpoints %s/%s: %w", m.Namespace, name, err)
	}
	return objs, nil
}

// UpdateMirrorService does to a mirror made by CreateMirror what Linkerd's
// service mirror does when the remote Service itself changes (a label or an
// annotation edited), m being the remote state (cluster_watcher.go
// handleRemoteExportedServiceUpdated; handleRemoteServiceUpdated in 2.14):
// it rewrites the headless mirror's Endpoints as a ClusterIP mirror's, one
// subset of the gateway address (no hostname) on the gateway port, through
// updateMirrorEndpoints (not ready with m.GatewayDown), annotated with the
// Link's gateway identity, and then the headless Service's labels,
// annotations and ports. The per-pod mirrors are left as they are; the
// headless mirror gets its addresses back on the next remote Endpoints change
// (UpdateMirror).
func UpdateMirrorService(ctx context.Context, c kubernetes.Interface, m Mirror) error {
	if err := m.validate(); err != nil {
		return err
	}
	name := MirroredName(m.Service, m.Cluster)
	gateway := GatewayIP
	if m.IPv6 {
		gateway = GatewayIPv6
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ep, err := c.CoreV1().Endpoints(m.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ep.Subsets = []corev1.EndpointSubset{gatewaySubset([]corev1.EndpointAddress{{IP: gateway}}, gatewayPorts(m.Ports), !m.GatewayDown)}
		maps.Copy(ep.Annotations, m.identity())
		_, err = c.CoreV1().Endpoints(m.Namespace).Update(ctx, ep, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update headless mirror endpoints %s/%s: %w", m.Namespace, name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := c.CoreV1().Services(m.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		svc.Labels = mirrorLabels(m.Cluster, m.Labels)
		svc.Annotations = m.serviceAnnotations()
		svc.Spec.Ports = servicePorts(m.Ports)
		_, err = c.CoreV1().Services(m.Namespace).Update(ctx, svc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update headless mirror service %s/%s: %w", m.Namespace, name, err)
	}
	return nil
}

// DeleteMirror deletes what Linkerd deletes when the service is unexported
// or the link removed: the per-pod Services and Endpoints, then the headless
// mirror Service and Endpoints. (No endpoints controller runs here to remove
// Endpoints of deleted Services, so they are deleted explicitly, as Linkerd's
// unlink cleanup does.) Missing objects are not an error.
func DeleteMirror(ctx context.Context, c kubernetes.Interface, namespace, service, cluster string) error {
	name := MirroredName(service, cluster)
	pods, err := podMirrors(ctx, c, namespace, name)
	if err != nil {
		return err
	}
	for pod := range pods {
		if err := deleteServiceAndEndpoints(ctx, c, namespace, pod); err != nil {
			return err
		}
	}
	return deleteServiceAndEndpoints(ctx, c, namespace, name)
}

func (m Mirror) validate() error {
	if m.Namespace == "" || m.Service == "" || m.Cluster == "" {
		return fmt.Errorf("mirror needs Namespace, Service and Cluster, got %q/%q from %q", m.Namespace, m.Service, m.Cluster)
	}
	if len(m.Ports) == 0 {
		// Linkerd skips exported services without ports.
		return fmt.Errorf("mirror %s/%s needs at least one port", m.Namespace, m.Service)
	}
	return nil
}

// serviceAnnotations are the headless mirror Service's annotations
// (getMirrorServiceAnnotations).
func (m Mirror) serviceAnnotations() map[string]string {
	a := maps.Clone(m.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationRemoteResourceVersion] = remoteResourceVersion
	if !m.OmitFQName {
		a[AnnotationRemoteSvcFqName] = fqName(m.Service, m.Namespace)
	}
	return a
}

// endpointsAnnotations are the headless mirror Endpoints' annotations.
func (m Mirror) endpointsAnnotations() map[string]string {
	a := m.identity()
	if !m.OmitFQName {
		a[AnnotationRemoteSvcFqName] = fqName(m.Service, m.Namespace)
	}
	return a
}

// identity is the gateway identity annotation of the mirrors' Endpoints, if any.
func (m Mirror) identity() map[string]string {
	switch m.GatewayIdentity {
	case "":
		return map[string]string{AnnotationRemoteGatewayIdentity: GatewayIdentity}
	case "-":
		return map[string]string{}
	}
	return map[string]string{AnnotationRemoteGatewayIdentity: m.GatewayIdentity}
}

// mirrored returns the remote endpoints Linkerd mirrors: the ready ones.
func (m Mirror) mirrored() []RemoteEndpoint {
	var out []RemoteEndpoint
	for _, e := range m.Endpoints {
		if e.Ready {
			out = append(out, e)
		}
	}
	return out
}

// subsets builds the headless mirror Endpoints' single subset: every mirrored
// endpoint, in addresses while the service mirror believes the gateway alive,
// in notReadyAddresses otherwise (updateReadiness).
func (m Mirror) subsets(objs *MirrorObjects, alive bool) []corev1.EndpointSubset {
	var addrs []corev1.EndpointAddress
	for _, e := range m.mirrored() {
		addrs = append(addrs, corev1.EndpointAddress{Hostname: e.Hostname, IP: objs.ClusterIPs[e.Hostname]})
	}
	if len(addrs) == 0 {
		return nil
	}
	// The remote Endpoints' ports, copied by Linkerd: the target ports.
	var ports []corev1.EndpointPort
	for _, p := range m.Ports {
		ports = append(ports, corev1.EndpointPort{Name: p.Name, Port: p.target(), Protocol: p.protocol()})
	}
	return []corev1.EndpointSubset{gatewaySubset(addrs, ports, alive)}
}

// createPodMirror creates the per-pod "endpoint mirror" Service of hostname
// and its Endpoints to the gateway, and records its ClusterIP in objs.
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
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: labels, Annotations: annotations},
		Subsets:    []corev1.EndpointSubset{gatewaySubset([]corev1.EndpointAddress{{IP: gateway}}, gatewayPorts(m.Ports), !m.GatewayDown)},
	}
	if _, err := c.CoreV1().Endpoints(m.Namespace).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create endpoint mirror endpoints %s/%s: %w", m.Namespace, name, err)
	}
	objs.PodServices[hostname] = name
	objs.ClusterIPs[hostname] = created.Spec.ClusterIP
	return nil
}

// gatewaySubset is a subset of addrs, in addresses while the gateway is
// alive and in notReadyAddresses while it is not (Linkerd's updateReadiness).
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
// service: ClusterIP Service <svc>-<cluster> and Endpoints to the gateway.
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
// and remote-service, and no Endpoints. It must never become a global
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

// Node is a cluster node with topology labels, and optionally the InternalIP addresses and pod
// CIDRs a kubelet and the node IPAM controller would give it.
type Node struct {
	Name, Zone, Region string
	Addresses          []string
	PodCIDRs           []string
}

// CreateNode creates a Node with the zone, region and hostname labels and a
// Ready condition (written through the status subresource).
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

// CreateStatefulSet creates the headless Service and the pods, then writes
// each pod's status as a kubelet would (phase Running, podIP(s), conditions).
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

// SetPodReady sets a pod's Ready and ContainersReady conditions.
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
