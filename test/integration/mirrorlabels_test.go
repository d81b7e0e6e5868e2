package integration

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The ServiceAccounts Linkerd's service mirrors run as, in its multicluster namespace (linkerd2,
// github.com/linkerd/linkerd2):
//   - linkerd-service-mirror-<link>: multicluster/charts/linkerd-multicluster-link/templates/
//     service-mirror.yaml, at stable-2.14.10, version-2.15 to version-2.20 and edge-26.8.3 (from 2.18
//     made by the deprecated `linkerd multicluster link`);
//   - controller-<link>: multicluster/charts/linkerd-multicluster/templates/controller/deployment.yaml
//     and controller/rbac.yaml, at version-2.18 (edge-25.3.3) to version-2.20 and edge-26.8.3;
//   - linkerd-local-service-mirror, which writes the federated services, <svc>-federated, labelled
//     mirror.linkerd.io/mirrored-service (multicluster/service-mirror/cluster_watcher.go
//     getFederatedServiceLabels): multicluster/charts/linkerd-multicluster/templates/
//     local-service-mirror.yaml, at version-2.17 (edge-24.11.2) to version-2.20 and edge-26.8.3.
//
// The namespace is the charts' {{.Release.Namespace}}: linkerd-multicluster unless `--namespace`
// (multicluster/cmd/link.go, link-gen.go) or Helm says otherwise.
const linkerdNamespace = "linkerd-multicluster"

// linkerdRules are the rules Linkerd grants each service mirror on this cluster's objects
// (service-mirror.yaml's linkerd-service-mirror-access-local-resources-<link>,
// controller-clusterrole.yaml's linkerd-multicluster-controller-access-local-resources,
// local-service-mirror.yaml's linkerd-local-service-mirror-access-local-resources).
var linkerdRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"endpoints", "services"}, Verbs: []string{"list", "get", "watch", "create", "delete", "update"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "get", "watch"}},
}

// TestMirrorLabelsPolicy applies docs/linkerd.md's admission policy ("Only Linkerd makes a
// mirror"), exactly as written, and checks each of its promises with the identities it names, each
// impersonated: a namespace editor and a cluster admin may neither make a Service a mirror nor
// change what makes one, Linkerd's service mirrors of every release may, nobody gives a mirror a
// selector, and deletes, the garbage collector and namespace deletion still work. First, without
// the policy, it shows the attack it stops: an editor's fake mirror puts their pod in the answer.
func TestMirrorLabelsPolicy(t *testing.T) {
	t.Parallel()
	// Of its own: the policy binds to every namespace, and other tests write mirrors as admin. Two
	// more controllers: one gives the edit role its rules, the other type-checks policies.
	own := harness.StartWith(t, harness.Options{Controllers: []string{"clusterrole-aggregation-controller", "validatingadmissionpolicy-status-controller"}})
	ctx := context.Background()
	const ns = "db"
	for _, n := range []string{ns, linkerdNamespace} {
		must(t, harness.EnsureNamespace(ctx, own.Client, n))
	}
	recipe, policy := mirrorPolicyRecipe(t)
	message := func(word string) string {
		t.Helper()
		var found []string
		for _, v := range policy.Spec.Validations {
			if strings.Contains(v.Message, word) {
				found = append(found, v.Message)
			}
		}
		if len(found) != 1 {
			t.Fatalf("docs/linkerd.md: want one rule whose message says %q, got %q", word, found)
		}
		return found[0]
	}
	labelsRule, annotationsRule, selectorRule := message("labels"), message("annotations"), message("selector")

	// Who writes: an editor of the namespaces (edit, as namespace owners get), the cluster admin
	// (system:masters, whom RBAC never denies), Linkerd's service mirrors with Linkerd's own rules,
	// and an impostor with the same rules and name as a service mirror, in the wrong namespace.
	sa := func(namespace, name string) string { return "system:serviceaccount:" + namespace + ":" + name }
	for _, n := range []string{ns, linkerdNamespace} {
		_, err := own.Client.RbacV1().RoleBindings(n).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "editor"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}},
		}, metav1.CreateOptions{})
		must(t, err)
	}
	type identity struct {
		name, short string // short names its objects
		c           kubernetes.Interface
		patches     bool // may patch Services: Linkerd's rules allow updates only
		status      bool // may write services/status
	}
	var linkerd []identity
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "controller-east"}}
	for _, name := range []string{"linkerd-service-mirror-east", "controller-east", "linkerd-local-service-mirror"} {
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: linkerdNamespace, Name: name})
		linkerd = append(linkerd, identity{name: name, short: name, c: impersonate(t, own, sa(linkerdNamespace, name))})
	}
	_, err := own.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-service-mirror"}, Rules: linkerdRules}, metav1.CreateOptions{})
	must(t, err)
	_, err = own.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-service-mirror"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "linkerd-service-mirror"},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	must(t, err)
	editor := impersonate(t, own, sa(ns, "default"))
	eventually(t, "the edit role aggregated", func() error {
		r, err := own.Client.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "services") && slices.Contains(rule.Verbs, "create") {
				return nil
			}
		}
		return fmt.Errorf("%d rules, none creates Services", len(r.Rules))
	})
	// A holder of services/status, as the cloud service controller is: its Service rules of
	// system:controller:service-controller (k8s.io/kubernetes v1.36.3, plugin/pkg/auth/authorizer/
	// rbac/bootstrappolicy/controller_policy.go; the nodes and events rules left out). A write of
	// the subresource may change the Service's metadata too.
	_, err = own.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "service-status"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update", "patch"}},
		}}, metav1.CreateOptions{})
	must(t, err)
	_, err = own.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "service-status"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "service-status"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "service-controller"}},
	}, metav1.CreateOptions{})
	must(t, err)
	others := []identity{
		{"an editor of the namespace", "editor", editor, true, false},
		{"the cluster admin", "admin", own.Client, true, true},
		{"an impostor in the wrong namespace", "impostor", impersonate(t, own, sa(ns, "controller-east")), false, false},
		{"a holder of services/status", "status", impersonate(t, own, sa("kube-system", "service-controller")), false, true},
	}

	// Without the policy: an editor's headless Service labelled as cluster evil's mirror of foo,
	// selecting their own pod, which kube-controller-manager publishes under those labels, answers
	// foo.db.global.
	must(t, harness.CreateNode(ctx, own.Client, harness.Node{Name: "node-a", Zone: "us-east-1a", Region: "us-east-1"}))
	spoof := mirrorService("foo-evil", map[string]string{"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "evil"},
		map[string]string{"mirror.linkerd.io/remote-svc-fq-name": "foo.db.svc.cluster.local"})
	spoof.Spec.Selector = map[string]string{"app": "foo-evil"}
	_, err = editor.CoreV1().Services(ns).Create(ctx, spoof, metav1.CreateOptions{})
	must(t, err)
	must(t, harness.CreatePod(ctx, own.Client, harness.StatefulSet{Namespace: ns, Service: "foo-evil", Ports: dbPorts},
		harness.Pod{Name: "evil-0", Node: "node-a", IP: "10.244.66.6", Ready: true}))
	c := harness.StartCoreDNS(t, own, fmt.Sprintf(corefile, ns))
	eventuallyExpect(t, c, "foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A 10.244.66.6")
	must(t, editor.CoreV1().Services(ns).Delete(ctx, "foo-evil", metav1.DeleteOptions{}))
	// An editor may write neither Endpoints nor EndpointSlices (Kubernetes 1.22 and later,
	// CVE-2021-25740), as the document says: the Service is the one object to guard.
	_, err = editor.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "foo-evil"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("an editor writing Endpoints: %v, want RBAC's Forbidden", err)
	}
	_, err = editor.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "foo-evil"},
		AddressType: discoveryv1.AddressTypeIPv4}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("an editor writing EndpointSlices: %v, want RBAC's Forbidden", err)
	}

	harness.RunKubectl(t, own, recipe, "apply", "-f", "-")
	eventually(t, "the policy type-checked", func() error {
		p, err := own.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return fmt.Errorf("status %+v", p.Status)
		}
		if w := p.Status.TypeChecking.ExpressionWarnings; len(w) > 0 {
			t.Fatalf("the policy's expressions do not type-check: %+v", w)
		}
		return nil
	})
	// In force once it denies the fake mirror, by any rule: which rule is for the checks below.
	eventuallyInForce(t, policy.Name, func(o metav1.CreateOptions) error {
		_, err := editor.CoreV1().Services(ns).Create(ctx, spoof, o)
		return err
	})
	if _, err := editor.CoreV1().Services(ns).Create(ctx, spoof, metav1.CreateOptions{}); !denied(err, labelsRule) {
		t.Errorf("the editor's fake mirror again: %v, want denied: %s", err, labelsRule)
	}

	// Linkerd's own writes, as CreateMirror makes them (the headless mirror, its per-pod mirrors and
	// their Endpoints), are admitted, and foo.db.global answers them and nothing of the editor's.
	foo, err := harness.CreateMirror(ctx, linkerd[1].c, mirrorOf(ns, "foo", "west", true))
	must(t, err)
	eventuallyExpect(t, c, "foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A "+foo.ClusterIPs["foo-0"])

	mirrorLabels := map[string]string{"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "west"}
	mirrorAnnotations := map[string]string{"mirror.linkerd.io/remote-svc-fq-name": "bar.db.svc.cluster.local"}
	// writes are the changes the policy leaves to Linkerd, each on objects of its own (n tells them
	// apart): a mirror made by Linkerd (mirror-<n>) and a Service that is none (plain-<n>, admin's).
	writes := []struct {
		what   string
		rule   string
		patch  bool
		status bool // through services/status
		do     func(c kubernetes.Interface, n string) error
	}{
		{"create a Service labelled as a mirror", labelsRule, false, false, func(c kubernetes.Interface, n string) error {
			_, err := c.CoreV1().Services(ns).Create(ctx, mirrorService("new-"+n, mirrorLabels, nil), metav1.CreateOptions{})
			return err
		}},
		{"label a Service as a mirror", labelsRule, false, false, func(c kubernetes.Interface, n string) error {
			return updateService(ctx, c, ns, "plain-"+n, func(s *corev1.Service) { s.Labels["mirror.linkerd.io/mirrored-service"] = "true" })
		}},
		{"label a Service as a mirror with a patch (kubectl label)", labelsRule, true, false, func(c kubernetes.Interface, n string) error {
			_, err := c.CoreV1().Services(ns).Patch(ctx, "plain-"+n, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"mirror.linkerd.io/headless-mirror-svc-name":"foo-west"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"change a mirror's cluster", labelsRule, false, false, func(c kubernetes.Interface, n string) error {
			return updateService(ctx, c, ns, "mirror-"+n, func(s *corev1.Service) { s.Labels["mirror.linkerd.io/cluster-name"] = "east" })
		}},
		{"remove a mirror's label", labelsRule, false, false, func(c kubernetes.Interface, n string) error {
			return updateService(ctx, c, ns, "mirror-"+n, func(s *corev1.Service) { delete(s.Labels, "mirror.linkerd.io/mirrored-service") })
		}},
		{"change a mirror's remote name", annotationsRule, false, false, func(c kubernetes.Interface, n string) error {
			return updateService(ctx, c, ns, "mirror-"+n, func(s *corev1.Service) {
				s.Annotations["mirror.linkerd.io/remote-svc-fq-name"] = "foo.db.svc.cluster.local"
			})
		}},
		// The same paths through services/status: an update, and a patch, of the subresource.
		{"label a Service as a mirror through its status", labelsRule, false, true, func(c kubernetes.Interface, n string) error {
			s, err := c.CoreV1().Services(ns).Get(ctx, "plain-"+n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Labels["mirror.linkerd.io/mirrored-service"], s.Labels["mirror.linkerd.io/cluster-name"] = "true", "target2"
			_, err = c.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"change a mirror's cluster with a patch of its status", labelsRule, true, true, func(c kubernetes.Interface, n string) error {
			_, err := c.CoreV1().Services(ns).Patch(ctx, "mirror-"+n, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"mirror.linkerd.io/cluster-name":"target2"}}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"change a mirror's remote name through its status", annotationsRule, false, true, func(c kubernetes.Interface, n string) error {
			s, err := c.CoreV1().Services(ns).Get(ctx, "mirror-"+n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Annotations["mirror.linkerd.io/remote-svc-fq-name"] = "foo.db.svc.cluster.local"
			_, err = c.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
			return err
		}},
	}
	objects := func(n string) {
		t.Helper()
		_, err := linkerd[1].c.CoreV1().Services(ns).Create(ctx, mirrorService("mirror-"+n, mirrorLabels, mirrorAnnotations), metav1.CreateOptions{})
		must(t, err)
		_, err = own.Client.CoreV1().Services(ns).Create(ctx, mirrorService("plain-"+n, map[string]string{"app": "plain"}, nil), metav1.CreateOptions{})
		must(t, err)
	}
	for _, o := range others {
		t.Run("denied to "+o.name, func(t *testing.T) {
			objects(o.short)
			for _, w := range writes {
				if w.patch && !w.status && !o.patches || w.status && !o.status || !w.status && o.short == "status" {
					continue
				}
				if err := w.do(o.c, o.short); !denied(err, w.rule) {
					t.Errorf("%s: %v, want denied: %s", w.what, err, w.rule)
				}
			}
		})
	}
	for _, l := range linkerd {
		t.Run("admitted from "+l.name, func(t *testing.T) {
			objects(l.short)
			for _, w := range writes {
				if w.patch || w.status { // Linkerd's rules grant neither
					continue
				}
				if err := w.do(l.c, l.short); err != nil {
					t.Errorf("%s: %v", w.what, err)
				}
			}
		})
	}

	t.Run("a mirror has no selector", func(t *testing.T) {
		for _, w := range []identity{linkerd[0], linkerd[1], others[0]} {
			err := updateService(ctx, w.c, ns, "foo-west", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "foo"} })
			if !denied(err, selectorRule) {
				t.Errorf("%s: a selector on a mirror: %v, want denied: %s", w.name, err, selectorRule)
			}
		}
		_, err := linkerd[1].c.CoreV1().Services(ns).Create(ctx, spoof, metav1.CreateOptions{})
		if !denied(err, selectorRule) {
			t.Errorf("Linkerd creating a mirror with a selector: %v, want denied: %s", err, selectorRule)
		}
	})

	t.Run("admitted from anyone", func(t *testing.T) {
		// Your own Services, labelled for Linkerd to export them.
		exported := mirrorService("web", map[string]string{"app": "web", "mirror.linkerd.io/exported": "true", "mirror.linkerd.io/federated": "member"}, nil)
		exported.Spec.Selector = map[string]string{"app": "web"}
		_, err := editor.CoreV1().Services(ns).Create(ctx, exported, metav1.CreateOptions{})
		must(t, err)
		must(t, updateService(ctx, editor, ns, "web", func(s *corev1.Service) {
			s.Labels["mirror.linkerd.io/exported"] = "remote-discovery"
			delete(s.Labels, "mirror.linkerd.io/federated")
		}))
		// What leaves a mirror a mirror: other labels and annotations, a finalizer (as the garbage
		// collector's), on and off.
		must(t, updateService(ctx, editor, ns, "foo-west", func(s *corev1.Service) {
			s.Labels["team"] = "db"
			s.Annotations["example.com/owner"] = "db-team"
			s.Finalizers = append(s.Finalizers, "example.com/hold")
		}))
		must(t, updateService(ctx, editor, ns, "foo-west", func(s *corev1.Service) { s.Finalizers = nil }))
		// Anything in Linkerd's namespace: its installer makes the gateway probe Services there.
		_, err = editor.CoreV1().Services(linkerdNamespace).Create(ctx, mirrorService("probe-gateway-west",
			map[string]string{"mirror.linkerd.io/mirrored-gateway": "true", "mirror.linkerd.io/cluster-name": "west"}, nil), metav1.CreateOptions{})
		must(t, err)
		// Deletes: Linkerd makes a deleted mirror again.
		must(t, editor.CoreV1().Services(ns).Delete(ctx, "mirror-editor", metav1.DeleteOptions{}))
	})

	// The editor's fake mirror, tried again, was never made, and the answer is still Linkerd's alone.
	if _, err := own.Client.CoreV1().Services(ns).Get(ctx, "foo-evil", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("foo-evil: %v, want not found", err)
	}
	eventuallyExpect(t, c, "foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A "+foo.ClusterIPs["foo-0"])

	t.Run("the garbage collector and namespace deletion", func(t *testing.T) {
		// Deleting with orphan or foreground propagation leaves a finalizer that the garbage
		// collector (kube-controller-manager, no Linkerd) takes off the mirror by an update.
		for _, d := range []struct {
			name   string
			policy metav1.DeletionPropagation
		}{{"mirror-admin", metav1.DeletePropagationOrphan}, {"foo-west", metav1.DeletePropagationForeground}} {
			name, policy := d.name, d.policy
			must(t, own.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(policy)}))
			eventually(t, name+" deleted with "+string(policy)+" propagation", func() error {
				s, err := own.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				if err != nil {
					return err
				}
				return fmt.Errorf("still there, finalizers %q", s.Finalizers)
			})
		}
		// No kubelet runs here to end the editor's pod's graceful deletion: it goes at once.
		must(t, harness.DeletePod(ctx, own.Client, ns, "evil-0"))
		must(t, own.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
		eventually(t, "namespace "+ns+" deleted", func() error {
			n, err := own.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("still there: %+v", n.Status)
		})
	})
}

// mirrorPolicyRecipe is docs/linkerd.md's ValidatingAdmissionPolicy block, as written, and the
// policy it holds.
func mirrorPolicyRecipe(t *testing.T) (string, *admissionregistrationv1.ValidatingAdmissionPolicy) {
	t.Helper()
	var recipe string
	for _, b := range fencedBlocks(readFile(t, repoPath(t, "docs", "linkerd.md")), "yaml") {
		if strings.Contains(b, "kind: ValidatingAdmissionPolicy\n") {
			if recipe != "" {
				t.Fatal("docs/linkerd.md has two ValidatingAdmissionPolicy blocks")
			}
			recipe = b
		}
	}
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for doc := range strings.SplitSeq(recipe, "\n---\n") {
		var kind metav1.TypeMeta
		must(t, yaml.Unmarshal([]byte(doc), &kind))
		switch kind.Kind {
		case "ValidatingAdmissionPolicy":
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			must(t, yaml.UnmarshalStrict([]byte(doc), policy))
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			must(t, yaml.UnmarshalStrict([]byte(doc), binding))
		}
	}
	if policy == nil || binding == nil || binding.Spec.PolicyName != policy.Name {
		t.Fatal("docs/linkerd.md: want a ValidatingAdmissionPolicy and its binding in one block")
	}
	// The test's Linkerd lives in the namespace the recipe names.
	for _, v := range policy.Spec.Variables {
		if v.Name == "linkerdNamespace" && v.Expression != "'"+linkerdNamespace+"'" {
			t.Fatalf("docs/linkerd.md: linkerdNamespace is %s, want '%s'", v.Expression, linkerdNamespace)
		}
	}
	return recipe, policy
}

// impersonate is a client of cp acting as user (a ServiceAccount's with its groups).
func impersonate(t *testing.T, cp *harness.ControlPlane, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		namespace, _, _ := strings.Cut(rest, ":")
		cfg.Impersonate.Groups = append(cfg.Impersonate.Groups, "system:serviceaccounts", "system:serviceaccounts:"+namespace)
	}
	c, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	return c
}

// denied reports whether err is an admission policy's denial with message.
func denied(err error, message string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "denied request: "+message)
}

// mirrorService is a headless Service without selector, as Linkerd's headless mirrors are.
func mirrorService(name string, labels, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}
}

// updateService reads Service name as c and writes it back changed by change (its labels and
// annotations never nil).
func updateService(ctx context.Context, c kubernetes.Interface, ns, name string, change func(*corev1.Service)) error {
	s, err := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	change(s)
	_, err = c.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
	return err
}

// TestMirrorPolicyInTheChart: the chart's linkerd.mirrorPolicy installs docs/linkerd.md's policy and
// binding as written there, but for the chart's labels and, with linkerd.multiclusterNamespace,
// the namespace the policy names; off by default.
func TestMirrorPolicyInTheChart(t *testing.T) {
	t.Parallel()
	recipe, _ := mirrorPolicyRecipe(t)
	helm := helms(t)["helm4"]
	_, defaults := helmTemplate(t, helm)
	for k := range defaults {
		if strings.Contains(k, "linkerd-mirrors") {
			t.Errorf("rendered by default: %s", k)
		}
	}
	for _, namespace := range []string{linkerdNamespace, "lmc"} {
		want := objectsOf(t, strings.Replace(recipe, `expression: "'`+linkerdNamespace+`'"`, `expression: "'`+namespace+`'"`, 1))
		_, got := helmTemplate(t, helm, "--set", "linkerd.mirrorPolicy=true", "--set", "linkerd.multiclusterNamespace="+namespace)
		for k, w := range want {
			g, ok := got[k]
			if !ok {
				t.Errorf("namespace %s: %s not rendered", namespace, k)
				continue
			}
			unstructured.RemoveNestedField(g.Object, "metadata", "labels") // the chart's own
			if !reflect.DeepEqual(g.Object, w.Object) {
				t.Errorf("namespace %s: %s differs from docs/linkerd.md's:\n%v\nwant\n%v", namespace, k, g.Object, w.Object)
			}
		}
	}
}
