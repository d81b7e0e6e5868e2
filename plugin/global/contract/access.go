package contract

import (
	"slices"
	"strings"
)

// Access is one thing the plugin does through the API: a verb on a resource, in a namespace ("":
// all namespaces), of one object by name ("": any).
type Access struct {
	Verb, Group, Resource, Namespace, Name string
}

func (a Access) String() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Name != "" {
		r += " " + a.Name
	}
	if a.Namespace == "" {
		return a.Verb + " " + r + " (all namespaces)"
	}
	return a.Verb + " " + r + " in " + a.Namespace
}

// GrantedBy reports whether an RBAC rule of these API groups, resources, resource names and verbs
// grants a, the rule's namespace aside: as kubernetes pkg/apis/rbac/v1/evaluation_helpers.go
// matches a request (VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches), "*"
// standing for any, and a rule that names objects granting only an access of one of them.
func (a Access) GrantedBy(groups, resources, names, verbs []string) bool {
	matches := func(l []string, s string) bool { return slices.Contains(l, s) || slices.Contains(l, "*") }
	return matches(groups, a.Group) && matches(resources, a.Resource) && matches(verbs, a.Verb) &&
		(len(names) == 0 || a.Name != "" && slices.Contains(names, a.Name))
}

// each is access of every verb on resource of group, in each of namespaces (none: all).
func each(namespaces []string, group, resource string, verbs ...string) []Access {
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var out []Access
	for _, ns := range namespaces {
		for _, v := range verbs {
			out = append(out, Access{Verb: v, Group: group, Resource: resource, Namespace: ns})
		}
	}
	return out
}

// Needs is what the plugin does through the API with options o (docs/rbac.md): its reads, with
// client_locality those of its clients, and with the writer its writes and its Lease. Without
// these, it does not work; the topology's reads (TopologyReads) it does without.
func (o *Options) Needs() []Access {
	out := append(each(o.Namespaces, "", "services", "list", "watch"), each(o.Namespaces, "discovery.k8s.io", "endpointslices", "list", "watch")...)
	if o.ClientLocality.Any() {
		// Where clients run: Nodes always; Pods with pod; the slices of the forwarders' and of
		// client_ecs_from's Services, in their namespaces when not all are watched.
		out = append(out, each(nil, "", "nodes", "list", "watch")...)
		if o.ClientLocality.Pod {
			out = append(out, each(nil, "", "pods", "list", "watch")...)
		}
		if len(o.Namespaces) > 0 {
			out = append(out, each(o.serviceNamespaces(), "discovery.k8s.io", "endpointslices", "list", "watch")...)
		}
	}
	if !o.Writer {
		return out
	}
	out = append(out, each(o.Namespaces, "", "services", "get", "create", "update", "delete")...)
	out = append(out, each(o.Namespaces, "discovery.k8s.io", "endpointslices", "get", "create", "update", "delete")...)
	out = append(out, each(o.Namespaces, "", "events", "create", "patch")...)
	if o.ServiceImports {
		out = append(out, each(o.Namespaces, "multicluster.x-k8s.io", "serviceimports", "get", "list", "watch", "create", "update", "delete")...)
	}
	if o.Owner[0] != "" {
		resource, group, _ := strings.Cut(o.Owner[0], ".")
		out = append(out, Access{Verb: "get", Group: group, Resource: resource, Name: o.Owner[1]})
	}
	return append(out,
		Access{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: o.LeaseNamespace},
		Access{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: o.LeaseNamespace, Name: o.LeaseName},
		Access{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: o.LeaseNamespace, Name: o.LeaseName})
}

// serviceNamespaces are the namespaces of the Services client_forwarders and client_ecs_from name
// that the plugin does not watch anyway, each once.
func (o *Options) serviceNamespaces() []string {
	var out []string
	for _, s := range append(slices.Clone(o.Forwarders), o.ECSServices...) {
		if ns, _, _ := strings.Cut(s, "/"); !o.Watches(ns) && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// LinksRead is the read of Linkerd's Links, in links_namespace: without it, where the API serves
// Links, no linked cluster's mirror is answered.
func (o *Options) LinksRead() []Access {
	return each([]string{o.LinksNamespace}, "multicluster.linkerd.io", "links", "list", "watch")
}

// TopologyReads are the optional reads of the topology the Corefile leaves out: each source the
// plugin cannot read is logged once and says nothing.
func TopologyReads() []Access {
	return append(each(nil, "about.k8s.io", "clusterproperties", "list", "watch"), each(nil, "", "nodes", "list", "watch")...)
}
