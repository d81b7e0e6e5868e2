package harness

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// HoldPodSlices labels the Endpoints of the per-pod mirrors created
	// endpointslice.kubernetes.io/skip-mirror, so that kube-controller-manager
	// mirrors them into EndpointSlices only once ReleasePodSlices removes the
	// label (kubernetes pkg/controller/endpointslicemirroring/
	// endpointslicemirroring_controller.go shouldMirror, utils.go skipMirror):
	// the moment between Linkerd's write of a new per-pod mirror and its slice,
	// usually milliseconds, held as long as a test needs. Not Linkerd's.
	HoldPodSlices bool
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
// cluster-name (linkerd2 multicluster/service-mirror/cluster_watcher.go
// getMirroredServiceLabels). (Linkerd before the Link v1alpha3 API put only
// the last two on the headless mirror's Endpoints and on the per-pod mirrors.)
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
// or the link removed (linkerd2 multicluster/service-mirror/cluster_watcher.go,
// its RemoteServiceDeleted and ClusterUnregistered events): the per-pod
// Services and Endpoints, then the headless mirror Service and Endpoints. (No endpoints controller runs here to remove
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
