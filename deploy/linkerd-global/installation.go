package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// installation is an installed plugin as the checks find it: by `linkerd global install`, Helm or
// deploy/base alike, each of which labels its Deployment app.kubernetes.io/part-of=coredns-global.
type installation struct {
	namespace string
	deploy    *appsv1.Deployment
	config    *pluginConfig
}

// partOfSelector selects the objects of any installation.
var partOfSelector = metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=" + partOf}

// findNamespace returns the extension's namespace: the one given, else the one labelled
// linkerd.io/extension=global, else the one holding an installation's Deployment.
func findNamespace(ctx context.Context, k *kube, given string) (string, error) {
	if given != "" {
		_, err := k.client.CoreV1().Namespaces().Get(ctx, given, metav1.GetOptions{})
		return given, err
	}
	nss, err := k.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: extensionLabel + "=" + extensionName})
	if err != nil {
		return "", err
	}
	var names []string
	for _, n := range nss.Items {
		names = append(names, n.Name)
	}
	if len(names) == 0 {
		ds, err := k.client.AppsV1().Deployments("").List(ctx, partOfSelector)
		if err != nil {
			return "", err
		}
		for _, d := range ds.Items {
			if !slices.Contains(names, d.Namespace) {
				names = append(names, d.Namespace)
			}
		}
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("no Namespace labelled %s=%s, and no Deployment labelled app.kubernetes.io/part-of=%s", extensionLabel, extensionName, partOf)
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("several installations, in namespaces %s: name one with --global-namespace", strings.Join(names, ", "))
}

// findInstallation returns the installation in namespace ns: its Deployment and its Corefile.
func findInstallation(ctx context.Context, k *kube, ns string) (*installation, error) {
	ds, err := k.client.AppsV1().Deployments(ns).List(ctx, partOfSelector)
	if err != nil {
		return nil, err
	}
	switch len(ds.Items) {
	case 0:
		return nil, fmt.Errorf("no Deployment labelled app.kubernetes.io/part-of=%s in namespace %s", partOf, ns)
	case 1:
	default:
		return nil, fmt.Errorf("%d Deployments labelled app.kubernetes.io/part-of=%s in namespace %s: install one per namespace", len(ds.Items), partOf, ns)
	}
	d := &ds.Items[0]
	cm, err := corefileMap(d)
	if err != nil {
		return nil, err
	}
	m, err := k.client.CoreV1().ConfigMaps(ns).Get(ctx, cm, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the Corefile of Deployment %s: %w", d.Name, err)
	}
	c, err := globalConfig("ConfigMap "+ns+"/"+cm, m.Data["Corefile"])
	if err != nil {
		return nil, err
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = ns
	}
	return &installation{namespace: ns, deploy: d, config: c}, nil
}

// corefileMap is the ConfigMap the Deployment mounts its Corefile from.
func corefileMap(d *appsv1.Deployment) (string, error) {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			return v.ConfigMap.Name, nil
		}
	}
	return "", fmt.Errorf("Deployment %s/%s mounts no ConfigMap: where is its Corefile?", d.Namespace, d.Name)
}

// pods lists the installation's pods, by its Deployment's selector.
func (in *installation) pods(ctx context.Context, k *kube) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(in.deploy.Spec.Selector)
	if err != nil {
		return nil, err
	}
	ps, err := k.client.CoreV1().Pods(in.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ps.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return ps.Items, nil
}

// podReady reports whether p runs and passes its readiness probe.
func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dnsPort is the plugin's DNS port in pod p (the chart's dns-tcp, 5353).
func dnsPort(p *corev1.Pod) int { return containerPort(p, 5353, "dns-tcp", "dns") }

// replicaAddr is the address of one ready replica's DNS: dnsAddr when given, else through
// reacher r to the first ready pod; stop closes it.
func replicaAddr(ctx context.Context, f *globalFlags, dnsAddr string) (addr string, in *installation, stop func(), err error) {
	k, err := f.client()
	if err != nil {
		return "", nil, nil, err
	}
	ns, err := findNamespace(ctx, k, f.namespace)
	if err != nil {
		return "", nil, nil, err
	}
	if in, err = findInstallation(ctx, k, ns); err != nil {
		return "", nil, nil, err
	}
	if dnsAddr != "" {
		return dnsAddr, in, func() {}, nil
	}
	pods, err := in.pods(ctx, k)
	if err != nil {
		return "", nil, nil, err
	}
	for i := range pods {
		if podReady(&pods[i]) {
			addr, stop, err = reacher{k: k, direct: f.directPods}.open(ctx, &pods[i], dnsPort(&pods[i]))
			return addr, in, stop, err
		}
	}
	return "", nil, nil, errors.New("no ready replica: see linkerd global check")
}

// isNotFound is apierrors.IsNotFound, for brevity at the call sites.
func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
