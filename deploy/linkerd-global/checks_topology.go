package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/globaldns/global/plugin/global/contract"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// linkVersions are the versions Linkerd's multicluster extension serves its Link in, newest first
// (linkerd2 multicluster/charts/linkerd-multicluster/templates/link-crd.yaml).
var linkVersions = []string{"v1alpha3", "v1alpha2", "v1alpha1"}

// link is a Linkerd Link as the plugin reads it: its cluster, named by spec.targetClusterName (else
// the Link's name), and its labels, which may give the cluster's locality.
type link struct {
	namespace, name, cluster string
	labels                   map[string]string
}

// links lists every Link; none when the CRD is not installed.
func links(ctx context.Context, k *kube) ([]link, error) {
	for _, v := range linkVersions {
		gvr := schema.GroupVersionResource{Group: "multicluster.linkerd.io", Version: v, Resource: "links"}
		list, err := k.dynamic.Resource(gvr).List(ctx, metav1.ListOptions{})
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var out []link
		for _, u := range list.Items {
			target, _, _ := unstructured.NestedString(u.Object, "spec", "targetClusterName")
			out = append(out, link{namespace: u.GetNamespace(), name: u.GetName(),
				cluster: strings.ToLower(cmp.Or(target, u.GetName())), labels: u.GetLabels()})
		}
		return out, nil
	}
	return nil, nil
}

// locality is cluster's locality as the plugin takes it: the Corefile's, else its Link's labels.
func (c *pluginConfig) locality(cluster string, labels map[string]string) map[string]string {
	if l := c.Localities[cluster]; len(l) > 0 {
		return l
	}
	out := map[string]string{}
	for _, k := range c.Topology {
		if v := labels[k]; v != "" {
			out[k] = v
		}
	}
	return out
}

// checkClusterName: with linked clusters, this cluster needs the name their Links give it.
func (hc *healthChecker) checkClusterName(ctx context.Context) error {
	apex := hc.anyApex()
	if apex == nil {
		return errors.New("no replica answered: see the synced check")
	}
	if apex.Get(contract.KeyNamedBy) != "default" {
		return nil
	}
	ls, err := links(ctx, hc.k)
	if err != nil {
		return err
	}
	if len(ls) == 0 {
		return nil // alone, a cluster needs no name
	}
	return fmt.Errorf("neither the Corefile (cluster) nor a ClusterProperty cluster.clusterset.k8s.io names this cluster, so it is %q: "+
		"a pod's own per-pod name is NXDOMAIN here; set clusterName to the name the other clusters' Links use", apex.Get(contract.KeyCluster))
}

// anyApex is the first line of some replica's apex explanation, nil if none answered.
func (hc *healthChecker) anyApex() line {
	for _, k := range sorted(keys(hc.apexes)) {
		return hc.apexes[k]
	}
	return nil
}

// checkLinks: every linked cluster needs a name the plugin accepts, and a locality, or its
// records are in the last tier, answered after every other cluster's.
func (hc *healthChecker) checkLinks(ctx context.Context) error {
	ls, err := links(ctx, hc.k)
	if err != nil {
		return err
	}
	var problems []string
	for _, l := range ls {
		if errs := validation.IsDNS1123Label(l.cluster); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("Link %s/%s: cluster name %q is not a DNS label, its mirrors are skipped: %s", l.namespace, l.name, l.cluster, strings.Join(errs, "; ")))
			continue
		}
		if len(hc.in.config.locality(l.cluster, l.labels)) == 0 {
			problems = append(problems, fmt.Sprintf("Link %s/%s: cluster %s has no locality: no `locality %s` in the Corefile (the chart's localities), and the Link has no %s label",
				l.namespace, l.name, l.cluster, l.cluster, strings.Join(hc.in.config.Topology, " or ")))
		}
	}
	return problemsErr(problems)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
