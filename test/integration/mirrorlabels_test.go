package integration

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

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
	w := newMirrorPolicyWorld(t)
	ctx, ns := context.Background(), w.ns
	c, spoof := w.attackWithoutThePolicy(t)
	w.apply(t, spoof)

	// Linkerd's own writes, as CreateMirror makes them (the headless mirror, its per-pod mirrors and
	// their Endpoints), are admitted, and foo.db.global answers them and nothing of the editor's.
	foo, err := harness.CreateMirror(ctx, w.who["controller-east"].c, mirrorOf(ns, "foo", "west", true))
	testkit.Must(t, err)
	eventuallyExpect(t, c, "foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A "+foo.ClusterIPs["foo-0"])

	// Each identity, on objects of its own, makes each write of the table it may make by RBAC.
	for _, id := range w.identities {
		t.Run(id.name, func(t *testing.T) {
			w.objects(t, id.short)
			for _, wr := range w.writes() {
				switch err := wr.do(id.c, id.short); {
				case slices.Contains(strings.Fields(wr.denied), id.short) && !denied(err, wr.rule):
					t.Errorf("%s: %v, want denied: %s", wr.what, err, wr.rule)
				case slices.Contains(strings.Fields(wr.admitted), id.short) && err != nil:
					t.Errorf("%s: %v, want admitted", wr.what, err)
				}
			}
		})
	}

	t.Run("a mirror has no selector", func(t *testing.T) {
		for _, short := range []string{"linkerd-service-mirror-east", "controller-east", "editor"} {
			err := updateService(ctx, w.who[short].c, ns, "foo-west", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "foo"} })
			if !denied(err, w.selectorRule) {
				t.Errorf("%s: a selector on a mirror: %v, want denied: %s", short, err, w.selectorRule)
			}
		}
		_, err := w.who["controller-east"].c.CoreV1().Services(ns).Create(ctx, spoof, metav1.CreateOptions{})
		if !denied(err, w.selectorRule) {
			t.Errorf("Linkerd creating a mirror with a selector: %v, want denied: %s", err, w.selectorRule)
		}
	})
	t.Run("admitted from anyone", w.admittedFromAnyone)

	// The editor's fake mirror, tried again, was never made, and the answer is still Linkerd's alone.
	if _, err := w.cp.Client.CoreV1().Services(ns).Get(ctx, "foo-evil", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("foo-evil: %v, want not found", err)
	}
	eventuallyExpect(t, c, "foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A "+foo.ClusterIPs["foo-0"])
	t.Run("the garbage collector and namespace deletion", w.deletions)
}

// mirrorPolicyWorld is TestMirrorLabelsPolicy's control plane, the policy's rules by message, and
// the identities that write.
type mirrorPolicyWorld struct {
	cp                              *harness.ControlPlane
	ns                              string
	recipe                          string
	policy                          *admissionregistrationv1.ValidatingAdmissionPolicy
	labelsRule, annotationsRule     string
	selectorRule                    string
	identities                      []writerIdentity
	who                             map[string]writerIdentity // by short
	editor                          kubernetes.Interface
	mirrorLabels, mirrorAnnotations map[string]string
}

// writerIdentity is one who writes Services, impersonated.
type writerIdentity struct {
	name, short string // short names its objects
	c           kubernetes.Interface
}

// The identities' shorts: Linkerd's service mirrors of every release, and the others.
const (
	linkerdMirrors      = "linkerd-service-mirror-east controller-east linkerd-local-service-mirror"
	editorAdminImpostor = "editor admin impostor"
)

// newMirrorPolicyWorld starts a control plane of its own (the policy binds to every namespace,
// and other tests write mirrors as admin) with two more controllers: one gives the edit role its
// rules, the other type-checks policies. Who writes: an editor of the namespaces (edit, as
// namespace owners get), the cluster admin (system:masters, whom RBAC never denies), Linkerd's
// service mirrors with Linkerd's own rules, an impostor with the same rules and name as a service
// mirror in the wrong namespace, and a holder of services/status.
func newMirrorPolicyWorld(t *testing.T) *mirrorPolicyWorld {
	own := harness.StartWith(t, harness.Options{Controllers: []string{"clusterrole-aggregation-controller", "validatingadmissionpolicy-status-controller"}})
	ctx := context.Background()
	w := &mirrorPolicyWorld{cp: own, ns: "db", who: map[string]writerIdentity{},
		mirrorLabels:      map[string]string{"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "west"},
		mirrorAnnotations: map[string]string{"mirror.linkerd.io/remote-svc-fq-name": "bar.db.svc.cluster.local"}}
	for _, n := range []string{w.ns, harness.LinkerdNamespace} {
		testkit.Must(t, harness.EnsureNamespace(ctx, own.Client, n))
	}
	w.recipe, w.policy = mirrorPolicyRecipe(t)
	w.labelsRule, w.annotationsRule, w.selectorRule = w.message(t, "labels"), w.message(t, "annotations"), w.message(t, "selector")

	sa := func(namespace, name string) string { return "system:serviceaccount:" + namespace + ":" + name }
	for _, n := range []string{w.ns, harness.LinkerdNamespace} {
		bindClusterRole(t, own, n, "editor", "edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: "default"})
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: w.ns, Name: "controller-east"}}
	var linkerd []writerIdentity
	for _, name := range strings.Fields(linkerdMirrors) {
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: harness.LinkerdNamespace, Name: name})
		linkerd = append(linkerd, writerIdentity{"admitted from " + name, name, impersonate(t, own, sa(harness.LinkerdNamespace, name))})
	}
	createClusterRole(t, own, "linkerd-service-mirror", linkerdRules, subjects...)
	// A holder of services/status, as the cloud service controller is: its Service rules of
	// system:controller:service-controller (k8s.io/kubernetes v1.36.3, plugin/pkg/auth/authorizer/
	// rbac/bootstrappolicy/controller_policy.go; the nodes and events rules left out). A write of
	// the subresource may change the Service's metadata too.
	createClusterRole(t, own, "service-status", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update", "patch"}},
	}, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "service-controller"})
	w.editor = impersonate(t, own, sa(w.ns, "default"))
	harness.Eventually(t, "the edit role aggregated", func() error {
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
	w.identities = append([]writerIdentity{
		{"denied to an editor of the namespace", "editor", w.editor},
		{"denied to the cluster admin", "admin", own.Client},
		{"denied to an impostor in the wrong namespace", "impostor", impersonate(t, own, sa(w.ns, "controller-east"))},
		{"denied to a holder of services/status", "status", impersonate(t, own, sa("kube-system", "service-controller"))},
	}, linkerd...)
	for _, id := range w.identities {
		w.who[id.short] = id
	}
	return w
}

// message is the one rule of the policy whose message says word.
func (w *mirrorPolicyWorld) message(t *testing.T, word string) string {
	t.Helper()
	var found []string
	for _, v := range w.policy.Spec.Validations {
		if strings.Contains(v.Message, word) {
			found = append(found, v.Message)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/linkerd.md: want one rule whose message says %q, got %q", word, found)
	}
	return found[0]
}

// bindClusterRole binds ClusterRole role to subjects in namespace ns, as RoleBinding name.
func bindClusterRole(t *testing.T, cp *harness.ControlPlane, ns, name, role string, subjects ...rbacv1.Subject) {
	t.Helper()
	_, err := cp.Client.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
}

// createClusterRole makes ClusterRole name of rules, bound cluster-wide to subjects.
func createClusterRole(t *testing.T, cp *harness.ControlPlane, name string, rules []rbacv1.PolicyRule, subjects ...rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
	_, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	testkit.Must(t, err)
	_, err = cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   subjects,
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
}

// attackWithoutThePolicy shows what the policy stops: an editor's headless Service labelled as
// cluster evil's mirror of foo, selecting their own pod, which kube-controller-manager publishes
// under those labels, answers foo.db.global. It returns the replica answering, and the spoof.
func (w *mirrorPolicyWorld) attackWithoutThePolicy(t *testing.T) (*harness.CoreDNS, *corev1.Service) {
	ctx, ns := context.Background(), w.ns
	testkit.Must(t, harness.CreateNode(ctx, w.cp.Client, harness.Node{Name: "node-a", Zone: "us-east-1a", Region: "us-east-1"}))
	spoof := mirrorService("foo-evil", map[string]string{"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "evil"},
		map[string]string{"mirror.linkerd.io/remote-svc-fq-name": "foo.db.svc.cluster.local"})
	spoof.Spec.Selector = map[string]string{"app": "foo-evil"}
	_, err := w.editor.CoreV1().Services(ns).Create(ctx, spoof, metav1.CreateOptions{})
	testkit.Must(t, err)
	testkit.Must(t, harness.CreatePod(ctx, w.cp.Client, harness.StatefulSet{Namespace: ns, Service: "foo-evil", Ports: dbPorts},
		harness.Pod{Name: "evil-0", Node: "node-a", IP: "10.244.66.6", Ready: true}))
	c := harness.StartCoreDNS(t, w.cp, fmt.Sprintf(corefile, ns))
	eventuallyExpect(t, c, "foo.db.global.", dns.TypeA, dns.RcodeSuccess, "A 10.244.66.6")
	testkit.Must(t, w.editor.CoreV1().Services(ns).Delete(ctx, "foo-evil", metav1.DeleteOptions{}))
	// An editor may write neither Endpoints nor EndpointSlices (Kubernetes 1.22 and later,
	// CVE-2021-25740), as the document says: the Service is the one object to guard.
	_, err = w.editor.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "foo-evil"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("an editor writing Endpoints: %v, want RBAC's Forbidden", err)
	}
	_, err = w.editor.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "foo-evil"},
		AddressType: discoveryv1.AddressTypeIPv4}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("an editor writing EndpointSlices: %v, want RBAC's Forbidden", err)
	}
	return c, spoof
}

// apply applies the recipe and waits until the policy type-checked and is in force (it denies
// the editor's fake mirror again, by the labels rule).
func (w *mirrorPolicyWorld) apply(t *testing.T, spoof *corev1.Service) {
	ctx := context.Background()
	harness.RunKubectl(t, w.cp, w.recipe, "apply", "-f", "-")
	harness.Eventually(t, "the policy type-checked", func() error {
		p, err := w.cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, w.policy.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return fmt.Errorf("status %+v", p.Status)
		}
		if warnings := p.Status.TypeChecking.ExpressionWarnings; len(warnings) > 0 {
			t.Fatalf("the policy's expressions do not type-check: %+v", warnings)
		}
		return nil
	})
	// In force once it denies the fake mirror, by any rule: which rule is for the checks below.
	eventuallyInForce(t, w.policy.Name, func(o metav1.CreateOptions) error {
		_, err := w.editor.CoreV1().Services(w.ns).Create(ctx, spoof, o)
		return err
	})
	if _, err := w.editor.CoreV1().Services(w.ns).Create(ctx, spoof, metav1.CreateOptions{}); !denied(err, w.labelsRule) {
		t.Errorf("the editor's fake mirror again: %v, want denied: %s", err, w.labelsRule)
	}
}

// objects makes an identity's objects, told apart by n: a mirror made by Linkerd (mirror-<n>) and
// a Service that is none (plain-<n>, admin's).
func (w *mirrorPolicyWorld) objects(t *testing.T, n string) {
	t.Helper()
	ctx := context.Background()
	_, err := w.who["controller-east"].c.CoreV1().Services(w.ns).Create(ctx, mirrorService("mirror-"+n, w.mirrorLabels, w.mirrorAnnotations), metav1.CreateOptions{})
	testkit.Must(t, err)
	_, err = w.cp.Client.CoreV1().Services(w.ns).Create(ctx, mirrorService("plain-"+n, map[string]string{"app": "plain"}, nil), metav1.CreateOptions{})
	testkit.Must(t, err)
}

// mirrorWrite is a change the policy leaves to Linkerd: the identities (by short) it denies, by
// rule, and those it admits. An identity in neither may not make the write by RBAC: patches
// (Linkerd's rules grant updates only) or writes of services/status, or others' writes of the
// status holder.
type mirrorWrite struct {
	what             string
	rule             string
	denied, admitted string
	do               func(c kubernetes.Interface, n string) error
}

// writes are the table of TestMirrorLabelsPolicy: each write, on the objects of identity n.
func (w *mirrorPolicyWorld) writes() []mirrorWrite {
	ctx, ns := context.Background(), w.ns
	update := func(name string, change func(*corev1.Service)) func(kubernetes.Interface, string) error {
		return func(c kubernetes.Interface, n string) error { return updateService(ctx, c, ns, name+n, change) }
	}
	patch := func(name, body string, subresources ...string) func(kubernetes.Interface, string) error {
		return func(c kubernetes.Interface, n string) error {
			_, err := c.CoreV1().Services(ns).Patch(ctx, name+n, types.MergePatchType, []byte(body), metav1.PatchOptions{}, subresources...)
			return err
		}
	}
	updateStatus := func(name string, change func(*corev1.Service)) func(kubernetes.Interface, string) error {
		return func(c kubernetes.Interface, n string) error {
			s, err := c.CoreV1().Services(ns).Get(ctx, name+n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(s)
			_, err = c.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
			return err
		}
	}
	return []mirrorWrite{
		{"create a Service labelled as a mirror", w.labelsRule, editorAdminImpostor, linkerdMirrors, func(c kubernetes.Interface, n string) error {
			_, err := c.CoreV1().Services(ns).Create(ctx, mirrorService("new-"+n, w.mirrorLabels, nil), metav1.CreateOptions{})
			return err
		}},
		{"label a Service as a mirror", w.labelsRule, editorAdminImpostor, linkerdMirrors,
			update("plain-", func(s *corev1.Service) { s.Labels["mirror.linkerd.io/mirrored-service"] = "true" })},
		{"label a Service as a mirror with a patch (kubectl label)", w.labelsRule, "editor admin", "",
			patch("plain-", `{"metadata":{"labels":{"mirror.linkerd.io/headless-mirror-svc-name":"foo-west"}}}`)},
		{"change a mirror's cluster", w.labelsRule, editorAdminImpostor, linkerdMirrors,
			update("mirror-", func(s *corev1.Service) { s.Labels["mirror.linkerd.io/cluster-name"] = "east" })},
		{"remove a mirror's label", w.labelsRule, editorAdminImpostor, linkerdMirrors,
			update("mirror-", func(s *corev1.Service) { delete(s.Labels, "mirror.linkerd.io/mirrored-service") })},
		{"change a mirror's remote name", w.annotationsRule, editorAdminImpostor, linkerdMirrors,
			update("mirror-", func(s *corev1.Service) {
				s.Annotations["mirror.linkerd.io/remote-svc-fq-name"] = "foo.db.svc.cluster.local"
			})},
		// The same paths through services/status: an update, and a patch, of the subresource.
		{"label a Service as a mirror through its status", w.labelsRule, "admin status", "",
			updateStatus("plain-", func(s *corev1.Service) {
				s.Labels["mirror.linkerd.io/mirrored-service"], s.Labels["mirror.linkerd.io/cluster-name"] = "true", "target2"
			})},
		{"change a mirror's cluster with a patch of its status", w.labelsRule, "admin status", "",
			patch("mirror-", `{"metadata":{"labels":{"mirror.linkerd.io/cluster-name":"target2"}}}`, "status")},
		{"change a mirror's remote name through its status", w.annotationsRule, "admin status", "",
			updateStatus("mirror-", func(s *corev1.Service) {
				s.Annotations["mirror.linkerd.io/remote-svc-fq-name"] = "foo.db.svc.cluster.local"
			})},
	}
}

// admittedFromAnyone: what leaves a mirror a mirror, and Services that are none, are anyone's to
// write.
func (w *mirrorPolicyWorld) admittedFromAnyone(t *testing.T) {
	ctx, ns, editor := context.Background(), w.ns, w.editor
	// Your own Services, labelled for Linkerd to export them.
	exported := mirrorService("web", map[string]string{"app": "web", "mirror.linkerd.io/exported": "true", "mirror.linkerd.io/federated": "member"}, nil)
	exported.Spec.Selector = map[string]string{"app": "web"}
	_, err := editor.CoreV1().Services(ns).Create(ctx, exported, metav1.CreateOptions{})
	testkit.Must(t, err)
	testkit.Must(t, updateService(ctx, editor, ns, "web", func(s *corev1.Service) {
		s.Labels["mirror.linkerd.io/exported"] = "remote-discovery"
		delete(s.Labels, "mirror.linkerd.io/federated")
	}))
	// What leaves a mirror a mirror: other labels and annotations, a finalizer (as the garbage
	// collector's), on and off.
	testkit.Must(t, updateService(ctx, editor, ns, "foo-west", func(s *corev1.Service) {
		s.Labels["team"] = "db"
		s.Annotations["example.com/owner"] = "db-team"
		s.Finalizers = append(s.Finalizers, "example.com/hold")
	}))
	testkit.Must(t, updateService(ctx, editor, ns, "foo-west", func(s *corev1.Service) { s.Finalizers = nil }))
	// Anything in Linkerd's namespace: its installer makes the gateway probe Services there.
	_, err = editor.CoreV1().Services(harness.LinkerdNamespace).Create(ctx, mirrorService("probe-gateway-west",
		map[string]string{"mirror.linkerd.io/mirrored-gateway": "true", "mirror.linkerd.io/cluster-name": "west"}, nil), metav1.CreateOptions{})
	testkit.Must(t, err)
	// Deletes: Linkerd makes a deleted mirror again.
	testkit.Must(t, editor.CoreV1().Services(ns).Delete(ctx, "mirror-editor", metav1.DeleteOptions{}))
}

// deletions: deleting with orphan or foreground propagation leaves a finalizer that the garbage
// collector (kube-controller-manager, no Linkerd) takes off the mirror by an update; the
// namespace goes.
func (w *mirrorPolicyWorld) deletions(t *testing.T) {
	ctx, ns, own := context.Background(), w.ns, w.cp
	gone := func(what string, get func() (string, error)) {
		t.Helper()
		harness.Eventually(t, what, func() error {
			state, err := get()
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("still there: %s", state)
		})
	}
	for _, d := range []struct {
		name   string
		policy metav1.DeletionPropagation
	}{{"mirror-admin", metav1.DeletePropagationOrphan}, {"foo-west", metav1.DeletePropagationForeground}} {
		testkit.Must(t, own.Client.CoreV1().Services(ns).Delete(ctx, d.name, metav1.DeleteOptions{PropagationPolicy: ptr.To(d.policy)}))
		gone(d.name+" deleted with "+string(d.policy)+" propagation", func() (string, error) {
			s, err := own.Client.CoreV1().Services(ns).Get(ctx, d.name, metav1.GetOptions{})
			return fmt.Sprintf("finalizers %q", s.GetFinalizers()), err
		})
	}
	// No kubelet runs here to end the editor's pod's graceful deletion: it goes at once.
	testkit.Must(t, harness.DeletePod(ctx, own.Client, ns, "evil-0"))
	testkit.Must(t, own.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	gone("namespace "+ns+" deleted", func() (string, error) {
		n, err := own.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return fmt.Sprintf("%+v", n.Status), err
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
		testkit.Must(t, yaml.Unmarshal([]byte(doc), &kind))
		switch kind.Kind {
		case "ValidatingAdmissionPolicy":
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			testkit.Must(t, yaml.UnmarshalStrict([]byte(doc), policy))
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			testkit.Must(t, yaml.UnmarshalStrict([]byte(doc), binding))
		}
	}
	if policy == nil || binding == nil || binding.Spec.PolicyName != policy.Name {
		t.Fatal("docs/linkerd.md: want a ValidatingAdmissionPolicy and its binding in one block")
	}
	// The test's Linkerd lives in the namespace the recipe names.
	for _, v := range policy.Spec.Variables {
		if v.Name == "harness.LinkerdNamespace" && v.Expression != "'"+harness.LinkerdNamespace+"'" {
			t.Fatalf("docs/linkerd.md: harness.LinkerdNamespace is %s, want '%s'", v.Expression, harness.LinkerdNamespace)
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
	testkit.Must(t, err)
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
	for _, namespace := range []string{harness.LinkerdNamespace, "lmc"} {
		want := objectsOf(t, strings.Replace(recipe, `expression: "'`+harness.LinkerdNamespace+`'"`, `expression: "'`+namespace+`'"`, 1))
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
