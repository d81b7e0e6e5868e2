package watch

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// What Linkerd's multicluster service mirror writes (linkerd2 pkg/k8s/labels.go).
const (
	LabelMirroredService   = "mirror.linkerd.io/mirrored-service"
	LabelClusterName       = "mirror.linkerd.io/cluster-name"
	LabelHeadlessMirror    = "mirror.linkerd.io/headless-mirror-svc-name" // per-pod endpoint mirrors
	LabelMirroredGateway   = "mirror.linkerd.io/mirrored-gateway"
	LabelRemoteDiscovery   = "multicluster.linkerd.io/remote-discovery"
	AnnotationRemoteFQName = index.AnnotationRemoteFQName

	// DefaultExportSelector selects the local Services Linkerd exports to other clusters.
	DefaultExportSelector = "mirror.linkerd.io/exported=true"

	// The headless mirrors' slices (and the ClusterIP mirrors'), without the per-pod mirrors'.
	mirrorSliceSelector    = LabelMirroredService + "=true,!" + LabelHeadlessMirror
	mirrorServiceSelector  = LabelMirroredService + "=true"
	podMirrorSliceSelector = LabelHeadlessMirror
)

// Reasons a Service or EndpointSlice (or part of one) is skipped: the values of the
// coredns_global_skipped_total{reason} metric.
const (
	ReasonNoClusterLabel     = "mirror_without_cluster_label"
	ReasonBadClusterName     = "invalid_cluster_name"
	ReasonNoRemoteName       = "mirror_without_remote_name"
	ReasonBadRemoteName      = "invalid_remote_name"
	ReasonNoServiceLabel     = "slice_without_service_label"
	ReasonFQDNSlice          = "fqdn_address_type"
	ReasonBadAddress         = "invalid_address"
	ReasonBadHostname        = "invalid_hostname"
	ReasonPortWithoutNumber  = "port_without_number"
	ReasonMirrorFallbackName = "mirror_name_from_suffix"
	ReasonBadPodMirror       = "invalid_pod_mirror"
	ReasonNoGatewayIdentity  = "mirror_without_gateway_identity"
	ReasonBadPolicy          = "invalid_policy"
	ReasonTooManyPorts       = "too_many_ports"
	ReasonLongAnnotation     = "annotation_too_long"
)

// What is kept of one object is bounded, whatever a tenant writes into it: every replica keeps it,
// and the cluster's own DNS too where the plugin runs in its CoreDNS.
const (
	// maxPorts is the most ports kept of a Service or an EndpointSlice, the first ones: a pod of a
	// database has a few; an SRV record per port beyond a reply's room is never answered.
	maxPorts = 100
	// maxAnnotationValue is the longest value of an annotation kept (to write on the -global
	// objects): Linkerd's are names and port lists of a few dozen bytes.
	maxAnnotationValue = 1024
)

// mirrorMember classifies a Service seen by the mirror Services' reflector. It returns the member
// and the global service it belongs to, or nil when the Service is not a headless mirror. Expected
// non-members (ClusterIP, per-pod, gateway and remote-discovery mirrors) are nil without problems.
func mirrorMember(s *corev1.Service, p *problems) (*index.Member, index.Key) {
	l := s.Labels
	if l[LabelHeadlessMirror] != "" || l[LabelMirroredGateway] != "" || l[LabelRemoteDiscovery] != "" ||
		s.Annotations[LabelRemoteDiscovery] != "" || s.Spec.ClusterIP != corev1.ClusterIPNone {
		return nil, index.Key{}
	}
	label := l[LabelClusterName]
	if label == "" {
		p.add(ReasonNoClusterLabel, "no "+LabelClusterName+" label")
		return nil, index.Key{}
	}
	// DNS names are case-insensitive and answered in lower case; a cluster name must be one label.
	cluster := strings.ToLower(label)
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		p.add(ReasonBadClusterName, "cluster name "+quote(label)+" is not a DNS label")
		return nil, index.Key{}
	}
	name, ok := remoteName(s, cluster, p)
	if !ok {
		return nil, index.Key{}
	}
	m := &index.Member{Namespace: s.Namespace, Name: s.Name, Origin: index.Origin{Cluster: cluster, Ports: servicePorts(s, p)},
		Settings: settings(s, p)}
	return m, index.Key{Namespace: s.Namespace, Name: name}
}

// podMirrorOf returns, for one of Linkerd's per-pod mirrors (cluster_watcher_headless.go
// createEndpointMirrorService), the headless mirror it belongs to and its ClusterIP; "" otherwise.
func podMirrorOf(s *corev1.Service, p *problems) (string, netip.Addr) {
	headless := s.Labels[LabelHeadlessMirror]
	if headless == "" {
		return "", netip.Addr{}
	}
	ip, err := netip.ParseAddr(s.Spec.ClusterIP)
	if err != nil || ip.Zone() != "" {
		p.add(ReasonBadPodMirror, "per-pod mirror with clusterIP "+quote(s.Spec.ClusterIP))
		return "", netip.Addr{}
	}
	return headless, ip.Unmap()
}

// remoteName recovers the original Service name of a mirror: the first label of the
// remote-svc-fq-name annotation, or, when that is absent, the mirror's name without "-<cluster>".
// Splitting names on "-" is ambiguous (foo-bar-baz), so the annotation always wins.
func remoteName(s *corev1.Service, cluster string, p *problems) (string, bool) {
	if fq := s.Annotations[AnnotationRemoteFQName]; fq != "" {
		name, _, _ := strings.Cut(fq, ".")
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			p.add(ReasonBadRemoteName, AnnotationRemoteFQName+" "+quote(fq)+" does not start with a Service name")
			return "", false
		}
		return strings.Clone(name), true // not the whole annotation, kept as long as the mirror
	}
	name, ok := strings.CutSuffix(s.Name, "-"+cluster)
	if !ok || len(validation.IsDNS1123Label(name)) > 0 {
		p.add(ReasonNoRemoteName, "no "+AnnotationRemoteFQName+" annotation and the name does not end in -"+cluster)
		return "", false
	}
	p.add(ReasonMirrorFallbackName, "no "+AnnotationRemoteFQName+" annotation: original name taken as "+quote(name))
	return name, true
}

// localMember classifies a Service seen by the export-selected reflector: only a headless Service
// that is not itself a mirror is a member, of the global service of the same name.
func localMember(s *corev1.Service, p *problems) (*index.Member, index.Key) {
	// The API only stores Services with valid names; a cache fed otherwise must not create an
	// unnamed global service.
	if s.Labels[LabelMirroredService] == "true" || s.Spec.ClusterIP != corev1.ClusterIPNone || len(validation.IsDNS1123Label(s.Name)) > 0 {
		return nil, index.Key{}
	}
	m := &index.Member{Namespace: s.Namespace, Name: s.Name, Origin: index.Origin{Ports: servicePorts(s, p)},
		Settings: settings(s, p)}
	return m, index.Key{Namespace: s.Namespace, Name: s.Name}
}

// policy is the owner's policy set on s (index.AnnotationPolicy), nil without a valid one: a bad
// value is reported, and the service answers as it would without one.
func policy(s *corev1.Service, p *problems) *index.Policy {
	v, ok := s.Annotations[index.AnnotationPolicy]
	if !ok {
		return nil
	}
	pol, err := index.ParsePolicy(v)
	if err != nil {
		p.add(ReasonBadPolicy, index.AnnotationPolicy+" "+quote(v)+" ignored: "+err.Error())
		return nil
	}
	return &pol
}

// settings are what the owner of s set on it that the plugin uses: nil when none.
func settings(s *corev1.Service, p *problems) *index.Settings {
	as, pol := keptAnnotations(s.Annotations, index.ServiceAnnotationKeys, p), policy(s, p)
	if as == nil && pol == nil {
		return nil
	}
	if as != nil {
		as = internAnnotations(as)
	}
	return &index.Settings{Annotations: as, Policy: pol}
}

// mirrorSliceAnnotations are the annotations of a headless mirror's slice that the slices written
// for its cluster carry: what Linkerd's destination service reads of a mirror's endpoints. Linkerd
// sets the gateway identity on every mirror whose Link names one. The remote service's name,
// <svc>.<ns>.svc.<the linked cluster's domain>, is kept relative to <svc>.<ns>., which is the global
// service's own (its name is the remote service's, as the mirror Service's own annotation says, and
// the mirror's name starts with it; its namespace the mirror's): the rest is what every mirror of
// one Link shares.
func mirrorSliceAnnotations(es *discoveryv1.EndpointSlice, p *problems) *index.Annotations {
	as := keptAnnotations(es.Annotations, index.SliceAnnotationKeys, p)
	if _, ok := as.Get(index.AnnotationGatewayIdentity); !ok {
		p.add(ReasonNoGatewayIdentity, "no "+index.AnnotationGatewayIdentity+" annotation: the slices written for its cluster carry none")
	}
	for i := range as {
		if a := &as[i]; a.Key == index.AnnotationRemoteFQName {
			name, rest, _ := strings.Cut(a.Value, ".")
			ns, rest, ok := strings.Cut(rest, ".")
			if ok && ns == es.Namespace && strings.HasPrefix(es.Labels[discoveryv1.LabelServiceName], name+"-") {
				a.Value, a.Relative = rest, true
			}
		}
	}
	if as = internAnnotations(as); as == nil {
		return nil
	}
	return &as
}

func servicePorts(s *corev1.Service, p *problems) []index.Port {
	ps := s.Spec.Ports
	if len(ps) > maxPorts {
		p.add(ReasonTooManyPorts, fmt.Sprintf("%d ports: the first %d kept", len(ps), maxPorts))
		ps = ps[:maxPorts]
	}
	out := make([]index.Port, 0, len(ps))
	for _, sp := range ps {
		out = append(out, index.Port{Name: sp.Name, Port: sp.Port, Protocol: protocol(sp.Protocol)})
	}
	return internPorts(out)
}

// keptAnnotations returns the annotations of all whose keys are in keys, but those of values
// longer than maxAnnotationValue.
func keptAnnotations(all map[string]string, keys []string, p *problems) index.Annotations {
	as := slices.DeleteFunc(index.KeepAnnotations(all, keys), func(a index.Annotation) bool {
		if len(a.Value) > maxAnnotationValue {
			p.add(ReasonLongAnnotation, fmt.Sprintf("annotation %s of %d bytes, more than %d: not kept", a.Key, len(a.Value), maxAnnotationValue))
			return true
		}
		return false
	})
	if len(as) == 0 {
		return nil
	}
	return as
}

func protocol(p corev1.Protocol) string {
	if p == "" {
		return string(corev1.ProtocolTCP)
	}
	return string(p)
}
