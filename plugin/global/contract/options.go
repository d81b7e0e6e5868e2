package contract

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Options are the options of a Corefile's `global` block that the outside depends on: what the
// plugin reads and writes through the API (and so the access it needs), its Lease, and its
// topology. The plugin's other options are its own business.
type Options struct {
	Writer         bool     // endpointslices is not off
	ServiceImports bool     // serviceimports on
	Namespaces     []string // namespaces: watched (and written); none is all
	LinksNamespace string   // links_namespace: where Links count
	LeaseNamespace string   // lease: "" is the pod's
	LeaseName      string
	LeaseDuration  time.Duration
	Localities     map[string]map[string]string // locality: cluster -> locality key -> value
	Topology       []string                     // topology: the locality keys of the cluster's tiers
	ClientTopology []string                     // topology: every key of a known client's tiers, in order
	ClientLocality Sources                      // client_locality: ecs, node, pod
	Forwarders     []string                     // client_forwarders: NAMESPACE/SERVICE
	ECSNetworks    []netip.Prefix               // client_ecs_from: its networks
	ECSServices    []string                     // client_ecs_from: its NAMESPACE/SERVICEs
	Owner          [2]string                    // owner: RESOURCE (<resource>.<group>) and NAME; none: ""

	given []string // the options set (Check's rules of client_forwarders)
}

// Defaults are the options of a `global` block that sets none.
func Defaults() Options {
	return Options{Writer: true, LinksNamespace: DefaultLinksNamespace, LeaseName: DefaultLeaseName, LeaseDuration: DefaultLeaseDuration,
		Localities: map[string]map[string]string{}, Topology: DefaultTopology(), ClientTopology: DefaultClientTopology(),
		Forwarders: DefaultForwarders()}
}

// Set reads option opt, with its arguments args, into o, checked as the plugin checks it at
// startup; known is false for an option the contract does not name (the plugin's own).
func (o *Options) Set(opt string, args []string) (known bool, err error) {
	switch opt {
	case "endpointslices":
		o.Writer, err = OnOff(opt, args)
	case "serviceimports":
		o.ServiceImports, err = OnOff(opt, args)
	case "namespaces":
		o.Namespaces, err = Namespaces(opt, args)
	case "links_namespace":
		o.LinksNamespace, err = Namespace(opt, args)
	case "lease":
		err = o.setLease(args)
	case "lease_duration":
		o.LeaseDuration, err = Duration(opt, args, true)
	case "locality":
		err = o.setLocality(args)
	case "topology":
		o.Topology, o.ClientTopology, err = topology(args)
	case "client_locality":
		o.ClientLocality, err = clientSources(args)
	case "client_forwarders":
		o.Forwarders, err = Services(opt, args)
	case "client_ecs_from":
		o.ECSNetworks, o.ECSServices, err = ecsFrom(opt, args)
	case "owner":
		o.Owner, err = owner(args)
	default:
		return false, nil
	}
	o.given = append(o.given, opt)
	return true, err
}

// Check checks what no single option can: the options that must agree. The plugin and
// linkerd-global both read a stanza with it (package stanza); the chart renders none that fails it.
func (o *Options) Check() error {
	switch {
	case o.ServiceImports && !o.Writer:
		return errors.New("serviceimports on needs the writer: it cannot be on with endpointslices off")
	case slices.Contains(o.given, "client_forwarders") && !o.ClientLocality.Any():
		return errors.New("client_forwarders needs client_locality: only answers ranked from the client tell forwarders apart")
	case o.ClientLocality.ECS != (len(o.ECSNetworks)+len(o.ECSServices) > 0):
		return errors.New("client_locality ecs and client_ecs_from go together: client_ecs_from names the resolvers trusted to set the option")
	case o.Owner[0] != "" && !o.Writer:
		return errors.New("owner needs the writer: it cannot be set with endpointslices off")
	}
	return nil
}

// setLease reads `lease NAMESPACE NAME`.
func (o *Options) setLease(args []string) error {
	if len(args) != 2 {
		return ErrArgCount
	}
	if err := Label("lease namespace", args[0]); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(args[1]); len(errs) > 0 {
		return fmt.Errorf("lease name %q: %s", args[1], strings.Join(errs, "; "))
	}
	o.LeaseNamespace, o.LeaseName = args[0], args[1]
	return nil
}

// setLocality reads `locality CLUSTER KEY=VALUE...`, each cluster once.
func (o *Options) setLocality(args []string) error {
	if len(args) < 2 {
		return ErrArgCount
	}
	cluster := args[0]
	if err := Label("locality cluster", cluster); err != nil {
		return err
	}
	if _, dup := o.Localities[cluster]; dup {
		return fmt.Errorf("locality for cluster %q given twice", cluster)
	}
	kv := map[string]string{}
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("locality %s: %q is not KEY=VALUE", cluster, a)
		}
		k, err := LabelKey(k)
		if err != nil {
			return err
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 || v == "" {
			return fmt.Errorf("locality %s: value %q of %s is not a label value", cluster, v, k)
		}
		if _, dup := kv[k]; dup {
			return fmt.Errorf("locality %s: %s given twice", cluster, k)
		}
		kv[k] = v
	}
	o.Localities[cluster] = kv
	return nil
}

// MaxTopologyKeys is the most keys `topology` takes.
const MaxTopologyKeys = 16

// topology reads `topology KEYS...`, the preference keys: those of the cluster's tiers, and all of
// them, hostname and cluster included, for a known client's.
func topology(args []string) (clusterKeys, clientKeys []string, err error) {
	if len(args) == 0 || len(args) > MaxTopologyKeys {
		return nil, nil, fmt.Errorf("topology takes 1 to %d keys", MaxTopologyKeys)
	}
	for _, a := range args {
		k, locality := TopologyKey(a)
		if locality {
			if k, err = LabelKey(a); err != nil {
				return nil, nil, err
			}
			clusterKeys = append(clusterKeys, k)
		}
		if slices.Contains(clientKeys, k) {
			return nil, nil, fmt.Errorf("topology lists %s twice", k)
		}
		clientKeys = append(clientKeys, k)
	}
	return clusterKeys, clientKeys, nil
}

// The sources of a client's place that client_locality takes.
const (
	SourceECS  = "ecs"  // an EDNS Client Subnet option (RFC 7871) with a Node's or Pod's address
	SourceNode = "node" // the query's source is a Node's address (NodeLocal DNSCache)
	SourcePod  = "pod"  // the query's source is a Pod's IP
)

// Sources are the sources client_locality learns a client's place from; the plugin tries them in
// this order.
type Sources struct{ ECS, Node, Pod bool }

// Any reports whether client_locality names a source: answers are then ranked from the client.
func (s Sources) Any() bool { return s.ECS || s.Node || s.Pod }

// clientSources reads `client_locality SOURCE...`: ecs, node or pod, each once.
func clientSources(args []string) (Sources, error) {
	var s Sources
	if len(args) == 0 {
		return s, ErrArgCount
	}
	for i, a := range args {
		if slices.Contains(args[:i], a) {
			return s, fmt.Errorf("client_locality lists %s twice", a)
		}
		switch a {
		case SourceECS:
			s.ECS = true
		case SourceNode:
			s.Node = true
		case SourcePod:
			s.Pod = true
		default:
			return s, fmt.Errorf("client_locality takes ecs, node or pod, not %q", a)
		}
	}
	return s, nil
}

// ecsFrom reads `client_ecs_from SOURCE...`: networks, and Services (NAMESPACE/SERVICE, told apart
// by having neither a dot nor a colon), whose pods' addresses are watched.
func ecsFrom(opt string, args []string) (nets []netip.Prefix, svcs []string, err error) {
	if len(args) == 0 {
		return nil, nil, ErrArgCount
	}
	var networks []string
	for _, a := range args {
		if strings.Contains(a, "/") && !strings.ContainsAny(a, ".:") {
			svcs = append(svcs, a)
		} else {
			networks = append(networks, a)
		}
	}
	if len(networks) > 0 {
		if nets, err = Networks(opt, networks); err != nil {
			return nil, nil, err
		}
	}
	if len(svcs) > 0 {
		svcs, err = Services(opt, svcs)
	}
	return nets, svcs, err
}

// OwnerResources are the cluster-scoped resources `owner` takes, as RESOURCE.GROUP, sorted: a
// namespaced owner of objects in other namespaces is never found by the garbage collector, which
// then deletes them at once; and only those a release commonly has.
func OwnerResources() []string {
	return []string{"clusterrolebindings.rbac.authorization.k8s.io", "clusterroles.rbac.authorization.k8s.io",
		"namespaces", "priorityclasses.scheduling.k8s.io"}
}

// owner reads `owner RESOURCE NAME`: the object, of one of OwnerResources, that owns the Services
// and ServiceImports written.
func owner(args []string) ([2]string, error) {
	if len(args) != 2 {
		return [2]string{}, ErrArgCount
	}
	if !slices.Contains(OwnerResources(), args[0]) {
		return [2]string{}, fmt.Errorf("owner: %q is not one of the cluster-scoped resources %s", args[0], strings.Join(OwnerResources(), ", "))
	}
	if errs := path.IsValidPathSegmentName(args[1]); len(errs) > 0 {
		return [2]string{}, fmt.Errorf("owner name %q: %s", args[1], strings.Join(errs, "; "))
	}
	return [2]string{args[0], args[1]}, nil
}

// Watches reports whether the plugin watches namespace ns.
func (o *Options) Watches(ns string) bool {
	return len(o.Namespaces) == 0 || slices.Contains(o.Namespaces, ns)
}
