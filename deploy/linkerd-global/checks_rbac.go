package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

func (hc *healthChecker) checkRBAC(ctx context.Context) error {
	return hc.mayAll(ctx, hc.in.config.Needs())
}

func (hc *healthChecker) checkTopologyRBAC(ctx context.Context) error {
	return hc.mayAll(ctx, contract.TopologyReads())
}

// checkLinksRBAC fails where the API serves Links and the plugin may not read them in
// links_namespace: it then answers no linked cluster's mirror.
func (hc *healthChecker) checkLinksRBAC(ctx context.Context) error {
	if served, err := hc.linksServed(); err != nil || !served {
		return err // none served: no Links to read, every mirror counts (the --pre check warns)
	}
	if err := hc.mayAll(ctx, hc.in.config.LinksRead()); err != nil {
		return fmt.Errorf("%w\nso the replicas answer no linked cluster's mirror: grant the Links read of docs/rbac.md", err)
	}
	return nil
}

// mayAll asks the API server, in a SubjectAccessReview per access, whether the installation's
// ServiceAccount may do each of as: the authorizer's answer, whatever the roles' shape.
func (hc *healthChecker) mayAll(ctx context.Context, as []contract.Access) error {
	sa := hc.in.deploy.Spec.Template.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ns := hc.ns
	var denied []string
	for _, a := range as {
		r, err := hc.k.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":" + sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: a.Group, Resource: a.Resource, Namespace: a.Namespace, Name: a.Name},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("ask whether ServiceAccount %s/%s may %s: %w", ns, sa, a, err)
		}
		if !r.Status.Allowed {
			denied = append(denied, a.String())
		}
	}
	if len(denied) > 0 {
		return fmt.Errorf("ServiceAccount %s/%s may not:\n%s", ns, sa, strings.Join(denied, "\n"))
	}
	return nil
}

// checkCanCreate asks, for the CLI's user, whether it may create every kind the chart renders.
func (hc *healthChecker) checkCanCreate(ctx context.Context) error {
	ns := hc.flags.extensionNamespace()
	// The kinds are what matters: an image is given in case the chart requires one.
	objs, err := render(valueOptions{values: []string{"image.repository=example.com/coredns-global"}}, ns)
	if err != nil {
		return err
	}
	var denied []string
	seen := map[string]bool{}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(hc.k.client.Discovery()))
	for _, o := range objs {
		a, err := creation(mapper, o)
		if err != nil {
			return err
		}
		if seen[a.String()] {
			continue
		}
		seen[a.String()] = true
		r, err := hc.k.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: a.Group, Resource: a.Resource, Namespace: a.Namespace},
		}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !r.Status.Allowed {
			denied = append(denied, a.String())
		}
	}
	if len(denied) > 0 {
		return errors.New("you may not:\n" + strings.Join(denied, "\n"))
	}
	return nil
}

// creation is the access that creates object o, its resource as the API serves its kind.
func creation(mapper meta.RESTMapper, o manifest) (contract.Access, error) {
	gv, err := schema.ParseGroupVersion(o.apiVersion)
	if err != nil {
		return contract.Access{}, err
	}
	m, err := mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: o.kind}, gv.Version)
	if err != nil {
		return contract.Access{}, fmt.Errorf("%s %s: %w", o.kind, o.name, err)
	}
	return contract.Access{Verb: "create", Group: m.Resource.Group, Resource: m.Resource.Resource, Namespace: o.namespace}, nil
}

func (hc *healthChecker) checkClusterDNSExists(ctx context.Context) error {
	ns, name, _ := strings.Cut(hc.opts.clusterDNS, "/")
	_, err := hc.k.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if isNotFound(err) {
		return fmt.Errorf("no Service %s: name the cluster DNS's with --cluster-dns, and forward the zone from it after installing", hc.opts.clusterDNS)
	}
	return err
}

func (hc *healthChecker) checkLinkCRD(context.Context) error {
	served, err := hc.linksServed()
	if err == nil && !served {
		return errors.New("the API serves no multicluster.linkerd.io Links: install Linkerd's multicluster extension to link clusters")
	}
	return err
}

// linksServed reports whether the API serves Linkerd's Links.
func (hc *healthChecker) linksServed() (bool, error) {
	_, err := hc.k.client.Discovery().ServerResourcesForGroupVersion("multicluster.linkerd.io/" + linkVersions[0])
	if isNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// checkMirrorPolicy warns unless a bound ValidatingAdmissionPolicy guards the mirror.linkerd.io
// labels of Services on both paths that write them: services and services/status. Without one,
// whoever may write a Service can make it a linked cluster's member (docs/linkerd.md).
func (hc *healthChecker) checkMirrorPolicy(ctx context.Context) error {
	vap := hc.k.client.AdmissionregistrationV1()
	policies, err := vap.ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	bindings, err := vap.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	bound := map[string]bool{}
	for _, b := range bindings.Items {
		bound[b.Spec.PolicyName] = true
	}
	for _, p := range policies.Items {
		if bound[p.Name] && guardsMirrors(&p) {
			return nil
		}
	}
	return errors.New("no admission policy lets only Linkerd's service mirrors set the mirror.linkerd.io labels of Services " +
		"(through services and services/status): whoever may write a Service can add members to a global service; " +
		"install docs/linkerd.md's, or the chart's (--set linkerd.mirrorPolicy=true)")
}

// guardsMirrors reports whether p checks the mirror.linkerd.io labels of Services written
// directly and through their status.
func guardsMirrors(p *admissionregistrationv1.ValidatingAdmissionPolicy) bool {
	var services, status bool
	if p.Spec.MatchConstraints != nil {
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			if !slices.Contains(r.APIGroups, "") && !slices.Contains(r.APIGroups, "*") {
				continue
			}
			for _, res := range r.Resources {
				services = services || res == "services" || res == "*"
				status = status || res == "services/status" || res == "*/status" || res == "*/*"
			}
		}
	}
	mentions := slices.ContainsFunc(p.Spec.Variables, func(v admissionregistrationv1.Variable) bool {
		return strings.Contains(v.Expression, "mirror.linkerd.io/")
	}) || slices.ContainsFunc(p.Spec.Validations, func(v admissionregistrationv1.Validation) bool {
		return strings.Contains(v.Expression, "mirror.linkerd.io/")
	})
	return services && status && mentions
}
