package history

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// change makes one change a cluster makes, chosen among those that apply now.
func (h *History) change() string {
	h.changes++
	for {
		ns := h.live[h.rng.IntN(len(h.live))]
		svc := services[h.rng.IntN(len(services))]
		cluster := clusters[h.rng.IntN(len(clusters))]
		var what string
		var err error
		ok := true
		switch op := h.rng.IntN(14); {
		case op < 8:
			what, ok, err = h.localChange(op, ns, svc)
		case op < 12:
			what, ok, err = h.mirrorChange(op, ns, svc, cluster)
		case op == 13:
			what, err = h.toggleLink(cluster)
		case h.rng.IntN(4) == 0 && h.next < len(h.namespaces):
			what, err = h.deleteNamespace(ns)
		default:
			what, err = h.flipGateway(cluster)
		}
		if ok {
			testkit.Must(h.t, err)
			return what
		}
	}
}

// localChange makes change op (0 to 7) of local service ns/svc; not ok when it does not apply.
func (h *History) localChange(op int, ns, svc string) (what string, ok bool, err error) {
	local := h.locals[ns+"/"+svc]
	switch {
	case op == 0 && local == nil:
		what, err = h.createLocal(ns, svc)
	case local == nil || op == 0:
		return "", false, nil
	case op <= 2:
		what, err = h.addPod(local)
	case op <= 4 && len(local.Pods) > 0:
		p := &local.Pods[h.rng.IntN(len(local.Pods))]
		p.Ready = !p.Ready
		what = fmt.Sprintf("pod %s/%s ready=%t", ns, p.Name, p.Ready)
		err = harness.SetPodReady(h.ctx, h.cp.Client, ns, p.Name, p.Ready)
	case op == 5 && len(local.Pods) > 0:
		i := h.rng.IntN(len(local.Pods))
		what = fmt.Sprintf("pod %s/%s deleted", ns, local.Pods[i].Name)
		err = harness.DeletePod(h.ctx, h.cp.Client, ns, local.Pods[i].Name)
		local.Pods = slices.Delete(local.Pods, i, i+1)
	case op == 6:
		what, err = h.editLocal(local)
	case op == 7 && h.rng.IntN(2) != 0:
		what, err = h.deleteLocal(local)
	default:
		return "", false, nil
	}
	return what, true, err
}

// mirrorChange makes change op (8 to 11) of ns/svc's mirror from cluster; not ok when it does not
// apply.
func (h *History) mirrorChange(op int, ns, svc, cluster string) (what string, ok bool, err error) {
	key := ns + "/" + svc
	m := h.mirrors[key+"/"+cluster]
	switch {
	case op == 8 && m == nil:
		what, err = h.link(ns, svc, cluster)
	case op == 8 || m == nil:
		return "", false, nil
	case op <= 10:
		what, err = h.remoteChange(m)
	case h.rng.IntN(2) == 0:
		m.Ports = renamed(m.Ports)
		what = fmt.Sprintf("remote Service %s of %s edited: port %s", key, cluster, m.Ports[0].Name)
		err = harness.UpdateMirrorService(h.ctx, h.cp.Client, *m)
	default:
		what = fmt.Sprintf("%s unlinked from %s", key, cluster)
		err = harness.DeleteMirror(h.ctx, h.cp.Client, ns, svc, cluster)
		delete(h.mirrors, key+"/"+cluster)
	}
	return what, true, err
}

// linkClusters serves Linkerd's Link CRD, as where its multicluster extension runs, and links
// every cluster of the history (Links of the control plane's, the first history's).
func (h *History) linkClusters() {
	var err error
	h.dyn, err = dynamic.NewForConfig(h.cp.Config)
	testkit.Must(h.t, err)
	testkit.Must(h.t, h.cp.InstallTopologyCRDs(h.ctx))
	testkit.Must(h.t, harness.EnsureNamespace(h.ctx, h.cp.Client, harness.LinkerdNamespace))
	h.linked = map[string]bool{}
	for _, c := range clusters {
		testkit.Must(h.t, harness.ApplyLink(h.ctx, h.dyn, harness.LinkerdNamespace, c, nil))
		h.linked[c] = true
	}
}

// toggleLink deletes the Link of cluster, whose mirrors stay but are no members then, or makes
// it again: after its mirrors exist, as when Links are re-created.
func (h *History) toggleLink(cluster string) (string, error) {
	links := h.dyn.Resource(harness.LinkResource).Namespace(harness.LinkerdNamespace)
	if h.linked[cluster] = !h.linked[cluster]; !h.linked[cluster] {
		return "Link of " + cluster + " deleted", links.Delete(h.ctx, cluster, metav1.DeleteOptions{})
	}
	return "Link of " + cluster + " made again", harness.ApplyLink(h.ctx, h.dyn, harness.LinkerdNamespace, cluster, nil)
}

func renamed(ports []harness.Port) []harness.Port {
	out := slices.Clone(ports)
	out[0].Name = map[string]string{"db": "sql", "sql": "db"}[out[0].Name]
	return out
}

func (h *History) pod(s *harness.StatefulSet) harness.Pod {
	h.ip++
	p := harness.Pod{Name: fmt.Sprintf("%s-%d", s.Service, h.ip), Node: []string{"east-a", "east-b"}[h.rng.IntN(2)],
		IP: fmt.Sprintf("10.%d.%d.%d", 100+h.seed%100, h.ip/250, 1+h.ip%250), Ready: h.rng.IntN(3) > 0}
	if len(s.IPFamilies) == 2 {
		p.IPv6 = netip.MustParseAddr(fmt.Sprintf("fd00:10:%x::%x", h.seed%0xffff, h.ip)).String()
	}
	return p
}

func (h *History) createLocal(ns, svc string) (string, error) {
	s := &harness.StatefulSet{Namespace: ns, Service: svc, Ports: ports, NotExported: h.rng.IntN(5) == 0}
	if h.rng.IntN(3) == 0 {
		s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	for range h.rng.IntN(3) {
		s.Pods = append(s.Pods, h.pod(s))
	}
	h.locals[ns+"/"+svc] = s
	return fmt.Sprintf("StatefulSet %s/%s created, exported=%t, families %v, pods %v", ns, svc, !s.NotExported, s.IPFamilies, s.Pods),
		harness.CreateStatefulSet(h.ctx, h.cp.Client, *s)
}

func (h *History) addPod(s *harness.StatefulSet) (string, error) {
	p := h.pod(s)
	s.Pods = append(s.Pods, p)
	return fmt.Sprintf("pod %s/%s created, %s ready=%t", s.Namespace, p.Name, p.IP, p.Ready), harness.CreatePod(h.ctx, h.cp.Client, *s, p)
}

// editLocal exports or un-exports the local Service, or renames its port.
func (h *History) editLocal(s *harness.StatefulSet) (string, error) {
	key := s.Namespace + "/" + s.Service
	rename := h.rng.IntN(2) == 0
	if rename {
		s.Ports = renamed(s.Ports)
	} else {
		s.NotExported = !s.NotExported
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := h.cp.Client.CoreV1().Services(s.Namespace).Get(h.ctx, s.Service, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rename {
			svc.Spec.Ports[0].Name = s.Ports[0].Name
		} else if !s.NotExported {
			svc.Labels = map[string]string{harness.LabelExported: "true"}
		} else {
			delete(svc.Labels, harness.LabelExported)
		}
		_, err = h.cp.Client.CoreV1().Services(s.Namespace).Update(h.ctx, svc, metav1.UpdateOptions{})
		return err
	})
	if rename {
		return fmt.Sprintf("Service %s port renamed %s", key, s.Ports[0].Name), err
	}
	return fmt.Sprintf("Service %s exported=%t", key, !s.NotExported), err
}

func (h *History) deleteLocal(s *harness.StatefulSet) (string, error) {
	delete(h.locals, s.Namespace+"/"+s.Service)
	err := h.cp.Client.CoreV1().Services(s.Namespace).Delete(h.ctx, s.Service, metav1.DeleteOptions{})
	for _, p := range s.Pods {
		err = errors.Join(err, harness.DeletePod(h.ctx, h.cp.Client, s.Namespace, p.Name))
	}
	return fmt.Sprintf("StatefulSet %s/%s deleted", s.Namespace, s.Service), err
}

func (h *History) link(ns, svc, cluster string) (string, error) {
	m := &harness.Mirror{Namespace: ns, Service: svc, Cluster: cluster, Ports: ports, Labels: map[string]string{"app": svc},
		GatewayDown: h.down[cluster], IPv6: h.rng.IntN(4) == 0}
	for i := range h.rng.IntN(4) {
		m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("%s-%d", svc, i), Ready: h.rng.IntN(4) > 0})
	}
	h.mirrors[ns+"/"+svc+"/"+cluster] = m
	_, err := harness.CreateMirror(h.ctx, h.cp.Client, *m)
	return fmt.Sprintf("%s/%s linked from %s (gateway down=%t, IPv6=%t): %v", ns, svc, cluster, m.GatewayDown, m.IPv6, m.Endpoints), err
}

// remoteChange adds, removes or flips a remote pod, as the service mirror then writes it.
func (h *History) remoteChange(m *harness.Mirror) (string, error) {
	switch n := len(m.Endpoints); {
	case n == 0 || h.rng.IntN(3) == 0:
		host := fmt.Sprintf("%s-%d", m.Service, n)
		for slices.ContainsFunc(m.Endpoints, func(e harness.RemoteEndpoint) bool { return e.Hostname == host }) {
			host += "x"
		}
		m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: host, Ready: true})
	case h.rng.IntN(2) == 0:
		i := h.rng.IntN(n)
		m.Endpoints = slices.Delete(m.Endpoints, i, i+1)
	default:
		i := h.rng.IntN(n)
		m.Endpoints[i].Ready = !m.Endpoints[i].Ready
	}
	m.GatewayDown = h.down[m.Cluster]
	_, err := harness.UpdateMirror(h.ctx, h.cp.Client, *m)
	return fmt.Sprintf("remote %s/%s in %s now %v (gateway down=%t)", m.Namespace, m.Service, m.Cluster, m.Endpoints, m.GatewayDown), err
}

// flipGateway has the service mirror mark a cluster's gateway dead or alive again on every
// per-pod mirror (repairEndpoints).
func (h *History) flipGateway(cluster string) (string, error) {
	h.down[cluster] = !h.down[cluster]
	for _, m := range h.mirrors {
		if m.Cluster == cluster {
			m.GatewayDown = h.down[cluster]
		}
	}
	for _, ns := range h.live {
		if _, err := harness.SetGatewayIn(h.ctx, h.cp.Client, ns, cluster, !h.down[cluster], nil); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("gateway of %s down=%t", cluster, h.down[cluster]), nil
}

// deleteNamespace deletes a namespace and everything in it, and creates the next one.
func (h *History) deleteNamespace(ns string) (string, error) {
	pods, err := h.cp.Client.CoreV1().Pods(ns).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items { // no kubelet here ends a graceful deletion
		if err := harness.DeletePod(h.ctx, h.cp.Client, ns, p.Name); err != nil {
			return "", err
		}
	}
	if err := h.cp.Client.CoreV1().Namespaces().Delete(h.ctx, ns, metav1.DeleteOptions{}); err != nil {
		return "", err
	}
	for k := range h.locals {
		if strings.HasPrefix(k, ns+"/") {
			delete(h.locals, k)
		}
	}
	for k := range h.mirrors {
		if strings.HasPrefix(k, ns+"/") {
			delete(h.mirrors, k)
		}
	}
	h.live = slices.DeleteFunc(h.live, func(s string) bool { return s == ns })
	// kube-controller-manager's namespace controller deletes the contents; after a fault step
	// restarted the API server, its watches come back within client-go's backoff first.
	harness.EventuallyLong(h.t, "namespace "+ns+" gone", func() error {
		_, err := h.cp.Client.CoreV1().Namespaces().Get(h.ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	created := h.createNamespace()
	return fmt.Sprintf("namespace %s deleted, %s created", ns, created), nil
}

func (h *History) createNamespace() string {
	ns := h.namespaces[h.next]
	h.next++
	testkit.Must(h.t, harness.EnsureNamespace(h.ctx, h.cp.Client, ns))
	h.live = append(h.live, ns)
	return ns
}
