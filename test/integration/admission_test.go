package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// writerUser is deploy/base's ServiceAccount, whom its admission policy (installed by TestMain)
// limits; TestWriterPolicy writes as it.
const writerUser = "system:serviceaccount:coredns-global:coredns-global"

var writer = harness.Token{Token: randomToken(), User: writerUser, Groups: []string{"system:masters"}}

// suiteWriter is who bin/coredns is in these tests: a static token user in system:masters. RBAC
// lets it do anything; what limits it is suitePolicy, deploy/base's admission policy but for whom
// it matches and which globaldns.io/writer it pins: each test writes under a lease of its own, so
// any lease's (TestWriterPolicy checks the pin itself). The tests' fixtures are written by the
// admin, whom no policy matches.
var suiteWriter = harness.Token{Token: randomToken(), User: "system:serviceaccount:coredns-global:suite-writer", Groups: []string{"system:masters"}}

// suitePolicy is deploy/base's rendered policy and binding made suiteWriter's.
func suitePolicy(rendered string) string {
	return anyLease(strings.NewReplacer(
		"name: coredns-global-write", "name: coredns-global-write-suite",
		"policyName: coredns-global-write", "policyName: coredns-global-write-suite",
		"'"+writerUser+"'", "'"+suiteWriter.User+"'",
	).Replace(rendered))
}

// writerPin is the pattern of a rendered writer policy's globaldns.io/writer: ^<ns>[.]<lease>$.
var writerPin = regexp.MustCompile(`\^[a-z0-9-]+\[\.\][a-z0-9-]+\$`)

// anyLease widens the writer pin of a rendered policy to every lease: the suite's writers each
// hold one of their own.
func anyLease(rendered string) string {
	return writerPin.ReplaceAllLiteralString(rendered, "^[a-z0-9-]+[.][a-z0-9-]+$")
}

// suffixWriters are the writers of the tests of another service_suffix, each a release of the
// chart of its own with that writer.serviceSuffix (coredns-global-a for -a): the shipped policy
// lets coredns-global write -global Services only. Their policies are installed by suffixWriter.
var suffixWriters = map[string]harness.Token{}

func suffixWriterTokens() []harness.Token {
	var out []harness.Token
	for _, suffix := range []string{"-a", "-b"} {
		suffixWriters[suffix] = harness.Token{Token: randomToken(), User: writerUser + suffix, Groups: []string{"system:masters"}}
		out = append(out, suffixWriters[suffix])
	}
	return out
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// installWriterPolicy installs deploy/base's ValidatingAdmissionPolicy and binding into cp, and
// waits until they deny the writer.
func installWriterPolicy(ctx context.Context, cp *harness.ControlPlane) error {
	base, err := filepath.Abs("../../deploy/base")
	if err != nil {
		return err
	}
	rendered, err := harness.TryKubectl(nil, "", "kustomize", base)
	if err != nil {
		return err
	}
	if rendered, err = admissionDocs(rendered); err != nil {
		return err
	}
	suite := suitePolicy(rendered)
	if suite == rendered || strings.Count(suite, "-suite") != 6 || strings.Contains(suite, "coredns-global-writer$") {
		return fmt.Errorf("deploy/base's policy is not as suitePolicy expects it:\n%s", rendered)
	}
	if err := installPolicy(ctx, cp, rendered, writer.Token, "coredns-global-write"); err != nil {
		return err
	}
	return installPolicy(ctx, cp, suite, suiteWriter.Token, "coredns-global-write-suite")
}

// admissionDocs returns the admission policy and its binding of the rendered objects.
func admissionDocs(rendered string) (string, error) {
	var docs []string
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return "", err
		}
		if strings.HasPrefix(head.Kind, "ValidatingAdmissionPolicy") {
			docs = append(docs, doc)
		}
	}
	if len(docs) != 4 {
		return "", fmt.Errorf("%d admission policies and bindings rendered, want 4:\n%s", len(docs), rendered)
	}
	return strings.Join(docs, "\n---\n"), nil
}

// installPolicy applies the admission policy and binding of the rendered objects to cp, and
// waits until policy (its name) denies the user of token a Service of no writer.
func installPolicy(ctx context.Context, cp *harness.ControlPlane, rendered, token, policy string) error {
	docs, err := admissionDocs(rendered)
	if err != nil {
		return err
	}
	if _, err := harness.TryKubectl(cp, docs, "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.BearerToken = token
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// A policy takes effect once the API server has read and compiled it.
	probe := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "harness-policy-probe"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}}}
	deadline := time.Now().Add(harness.Patience)
	for {
		_, err := as.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{})
		switch {
		case deniedBy(err, policy):
			return nil
		case err == nil:
			if err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("probe the policy %s: %w", policy, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the policy %s denies nothing after %v", policy, harness.Patience)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deniedBy reports whether err is admission policy's (its name) denial.
func deniedBy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// eventuallyInForce waits until the API server enforces admission policy (its name): until
// create, asked by dry run, is denied by it. The server compiles a new policy into its hooks up to
// a second after it is written (k8s.io/apiserver pkg/admission/plugin/policy/generic/
// policy_source.go), later on a busy machine.
func eventuallyInForce(t *testing.T, policy string, create func(metav1.CreateOptions) error) {
	t.Helper()
	harness.Eventually(t, "the policy "+policy+" in force", func() error {
		if err := create(metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !deniedBy(err, policy) {
			return fmt.Errorf("a write it denies, asked by dry run: %v", err)
		}
		return nil
	})
}

var suffixPolicies sync.Map // suffix -> *sync.Once

// suffixWriter installs the policy of the chart released as coredns-global<suffix> with
// writer.serviceSuffix suffix, and returns a kubeconfig of its writer (suffixWriters).
func suffixWriter(t *testing.T, suffix string) string {
	t.Helper()
	once, _ := suffixPolicies.LoadOrStore(suffix, new(sync.Once))
	once.(*sync.Once).Do(func() {
		_, objs := helmTemplate(t, helms(t)["helm4"], "--set", "fullnameOverride=coredns-global"+suffix+",writer.serviceSuffix="+suffix)
		var rendered []string
		for _, o := range objs {
			b, err := yaml.Marshal(o.Object)
			testkit.Must(t, err)
			rendered = append(rendered, string(b))
		}
		policy := strings.Join(rendered, "\n---\n")
		if !writerPin.MatchString(policy) {
			t.Fatalf("the policy of coredns-global%s pins no writer as anyLease expects:\n%s", suffix, policy)
		}
		testkit.Must(t, installPolicy(context.Background(), cp, anyLease(policy), suffixWriters[suffix].Token, "coredns-global"+suffix+"-write"))
	})
	kubeconfig, err := cp.KubeconfigFor(suffixWriters[suffix].Token)
	testkit.Must(t, err)
	return kubeconfig
}

// ourLabels are the labels of what the writer of lease coredns-global/coredns-global-writer writes for
// global service svc, plus more.
func ourLabels(svc string, more ...string) map[string]string {
	l := map[string]string{"app.kubernetes.io/managed-by": "coredns-global", "globaldns.io/writer": "coredns-global.coredns-global-writer",
		"globaldns.io/global-service": svc}
	for i := 0; i+1 < len(more); i += 2 {
		l[more[i]] = more[i+1]
	}
	return l
}

// event is an Event of type and reason on Service ns/svc, from coredns-global, as the writer's
// recorder makes them.
func event(ns, name, typ, reason, svc string) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: typ, Reason: reason, Message: "m",
		Source:         corev1.EventSource{Component: "coredns-global"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: svc}}
}

// TestWriterPolicy: deploy/base's admission policy (installed by TestMain) lets its ServiceAccount,
// impersonated here in system:masters so that RBAC allows everything, write nothing but what the
// writer writes: each foreign or misshapen write is denied with the policy's message, our own
// shapes are admitted.
func TestWriterPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: writerUser, Groups: []string{"system:masters"}}
	sa, err := kubernetes.NewForConfig(cfg)
	testkit.Must(t, err)
	admin := client()
	// The API server type-checks the policy's expressions against the resources' schemas.
	harness.EventuallyWithin(t, 5*time.Second, "the policy's type check", func() error {
		p, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "coredns-global-write", metav1.GetOptions{})
		if err != nil || p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return fmt.Errorf("not checked yet: %v %+v", err, p)
		}
		if w := p.Status.TypeChecking.ExpressionWarnings; len(w) > 0 {
			t.Fatalf("type check warnings: %+v", w)
		}
		return nil
	})

	port := []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}}
	// A foreign Service, and a foreign slice of it.
	foreign, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "db"}, Ports: port}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	slice := func(name string, labels map[string]string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.66"}}},
			Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	}
	// Another controller's slice of it: one labelled as the endpointslice controller's would be that
	// controller's to reconcile, and kube-controller-manager here deletes it (db has no pods) while
	// the writes below are tried, which then fail as not found instead of denied.
	foreignSlice, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("db-abcde", map[string]string{
		discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: "db-controller.example.com"}), metav1.CreateOptions{})
	testkit.Must(t, err)
	headless := func(name string, labels map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: port}}
	}

	const (
		own      = "coredns-global writes only its own objects"
		shape    = "coredns-global writes only headless Services"
		selector = "coredns-global writes only Services without a selector or externalIPs"
		name     = "coredns-global writes only the Service <svc>-global of global service <svc>"
		slices   = "coredns-global writes only EndpointSlices managed by global.globaldns.io"
		unrouted = "coredns-global writes only EndpointSlices labelled service.kubernetes.io/headless"
		mirrors  = "coredns-global writes no mirror.linkerd.io/ label, and no mirror.linkerd.io/ annotation"
		events   = "coredns-global writes only Warning Events GlobalServiceConflict of its own"
		finalize = "coredns-global adds no finalizer"
	)
	// A tenant's ordinary ClusterIP Service named as a global service's written one, and another
	// release's Service (another lease, so another globaldns.io/writer).
	_, err = admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "checkout-global"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "checkout"}, Ports: port}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	otherRelease := ourLabels("bar", "globaldns.io/writer", "coredns-global.other-writer")
	_, err = admin.CoreV1().Services(ns).Create(ctx, headless("bar-global", otherRelease), metav1.CreateOptions{})
	testkit.Must(t, err)
	ourSlice := func(name, svc string, more ...string) *discoveryv1.EndpointSlice {
		return slice(name, ourLabels(svc, append([]string{discoveryv1.LabelServiceName, svc + "-global",
			discoveryv1.LabelManagedBy, "global.globaldns.io", corev1.IsHeadlessService, ""}, more...)...))
	}
	svcs, eps := sa.CoreV1().Services(ns), sa.DiscoveryV1().EndpointSlices(ns)
	// A tenant's own headless Service named as a global service's written one would be: the
	// cluster DNS answers it from every slice naming it.
	_, err = admin.CoreV1().Services(ns).Create(ctx, headless("app-global", nil), metav1.CreateOptions{})
	testkit.Must(t, err)
	const owned = "coredns-global writes EndpointSlices only of the Services it wrote: app-global is not one"
	denied := []struct {
		what, message string
		write         func() error
	}{
		{"our slice naming a tenant's own headless Service app-global", owned, func() error {
			_, err := eps.Create(ctx, ourSlice("app-global-west-ipv4-0", "app"), metav1.CreateOptions{})
			return err
		}},
		{"an update of a foreign Service", own, func() error {
			s := foreign.DeepCopy()
			s.Spec.ExternalIPs = []string{"192.0.2.1"}
			_, err := svcs.Update(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"our labels put on a foreign Service", own, func() error {
			s := foreign.DeepCopy()
			s.Labels = ourLabels("db")
			_, err := svcs.Update(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"the deletion of a foreign Service", own, func() error { return svcs.Delete(ctx, foreign.Name, metav1.DeleteOptions{}) }},
		{"a slice adding an address to a foreign Service (CVE-2021-25740)", own, func() error {
			_, err := eps.Create(ctx, slice("db-extra", map[string]string{discoveryv1.LabelServiceName: "db"}), metav1.CreateOptions{})
			return err
		}},
		{"the same with our labels", slices, func() error {
			_, err := eps.Create(ctx, slice("db-ours", ourLabels("db", discoveryv1.LabelServiceName, "db", discoveryv1.LabelManagedBy, "global.globaldns.io")), metav1.CreateOptions{})
			return err
		}},
		{"our slice of a foreign Service, not managed by us", slices, func() error {
			_, err := eps.Create(ctx, slice("db-global-x", ourLabels("db", discoveryv1.LabelServiceName, "db-global")), metav1.CreateOptions{})
			return err
		}},
		{"an update of a foreign slice", own, func() error {
			s := foreignSlice.DeepCopy()
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"192.0.2.67"}})
			_, err := eps.Update(ctx, s, metav1.UpdateOptions{})
			return err
		}},
		{"the deletion of a foreign slice", own, func() error { return eps.Delete(ctx, foreignSlice.Name, metav1.DeleteOptions{}) }},
		{"a LoadBalancer Service with our labels (CVE-2020-8554)", shape, func() error {
			s := headless("foo-global", ourLabels("foo"))
			s.Spec.ClusterIP, s.Spec.Type = "", corev1.ServiceTypeLoadBalancer
			_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"a Service with our labels and externalIPs (CVE-2020-8554)", shape, func() error {
			s := headless("foo-global", ourLabels("foo"))
			s.Spec.ClusterIP, s.Spec.ExternalIPs = "", []string{"192.0.2.1"}
			_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"a headless Service with our labels and externalIPs", selector, func() error {
			s := headless("foo-global", ourLabels("foo"))
			s.Spec.ExternalIPs = []string{"192.0.2.1"}
			_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"a Service with our labels and a selector", selector, func() error {
			s := headless("foo-global", ourLabels("foo"))
			s.Spec.Selector = map[string]string{"app": "db"}
			_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"a Service with our labels and another suffix", name, func() error {
			_, err := svcs.Create(ctx, headless("foo-other", ourLabels("foo")), metav1.CreateOptions{})
			return err
		}},
		{"a Service with our labels named as a foreign one", name, func() error {
			_, err := svcs.Create(ctx, headless("kube-dns", ourLabels("foo")), metav1.CreateOptions{})
			return err
		}},
		{"a slice of a tenant's ClusterIP Service, unlabelled headless: kube-proxy routes it (CVE-2021-25740)", unrouted, func() error {
			s := ourSlice("checkout-global-west-ipv4-0", "checkout")
			delete(s.Labels, corev1.IsHeadlessService)
			_, err := eps.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"an MCS slice with serviceImports off", slices, func() error {
			s := ourSlice("foo-mcs-west-ipv4-0", "foo", "multicluster.kubernetes.io/service-name", "foo")
			delete(s.Labels, discoveryv1.LabelServiceName)
			_, err := eps.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"our slice also naming a ServiceImport with serviceImports off: the MCS DNS answers it", slices, func() error {
			_, err := eps.Create(ctx, ourSlice("foo-global-west-ipv4-8", "foo", "multicluster.kubernetes.io/service-name", "db"), metav1.CreateOptions{})
			return err
		}},
		{"our slice with a finalizer: its namespace stays Terminating", finalize, func() error {
			s := ourSlice("foo-global-west-ipv4-7", "foo")
			s.Finalizers = []string{"example.com/hold"}
			_, err := eps.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"our Service with a finalizer", finalize, func() error {
			s := headless("foo-global", ourLabels("foo"))
			s.Finalizers = []string{"example.com/hold"}
			_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"a Service labelled as a Linkerd mirror of target2", mirrors, func() error {
			_, err := svcs.Create(ctx, headless("zzz-global", ourLabels("zzz", "mirror.linkerd.io/mirrored-service", "true",
				"mirror.linkerd.io/cluster-name", "target2")), metav1.CreateOptions{})
			return err
		}},
		{"a slice with another mirror annotation", mirrors, func() error {
			s := ourSlice("foo-global-west-ipv4-9", "foo")
			s.Annotations = map[string]string{"mirror.linkerd.io/cluster-name": "target2"}
			_, err := eps.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"a Service with a mirror annotation", mirrors, func() error {
			s := headless("foo-global", ourLabels("foo"))
			s.Annotations = map[string]string{"mirror.linkerd.io/remote-svc-fq-name": "foo.db.svc.cluster.local"}
			_, err := svcs.Create(ctx, s, metav1.CreateOptions{})
			return err
		}},
		{"an Event that is not its conflict warning", events, func() error {
			_, err := sa.CoreV1().Events(ns).Create(ctx, event(ns, "pwned", "Normal", "Pulled", foreign.Name), metav1.CreateOptions{})
			return err
		}},
		{"the deletion of another release's Service", own, func() error { return svcs.Delete(ctx, "bar-global", metav1.DeleteOptions{}) }},
		{"a Service of another release's writer", own, func() error {
			_, err := svcs.Create(ctx, headless("foo-global", ourLabels("foo", "globaldns.io/writer", "coredns-global.other-writer")), metav1.CreateOptions{})
			return err
		}},
	}
	// The API server compiles a policy, and reads its params (app-global) from an informer of its
	// own, a moment after they are written.
	eventuallyInForce(t, "coredns-global-write-owned", func(o metav1.CreateOptions) error {
		_, err := eps.Create(ctx, ourSlice("app-global-west-ipv4-0", "app"), o)
		return err
	})
	// A slice naming a foreign Service is denied by both policies: either may say so.
	namesForeign := map[string]bool{"a slice adding an address to a foreign Service (CVE-2021-25740)": true, "the same with our labels": true,
		"an update of a foreign slice": true, "a slice of a tenant's ClusterIP Service, unlabelled headless: kube-proxy routes it (CVE-2021-25740)": true}
	for _, c := range denied {
		err := c.write()
		policy := "coredns-global-write"
		if c.message == owned {
			policy += "-owned"
		}
		want := "ValidatingAdmissionPolicy '" + policy + "' with binding '" + policy + "' denied request: " + c.message
		if namesForeign[c.what] && deniedBy(err, "coredns-global-write-owned") {
			continue
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", c.what, err, want)
		}
	}
	if s, err := admin.CoreV1().Services(ns).Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil || s.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the foreign Service changed: %v", err)
	}

	// What the writer writes: the -global Service, its slice and an MCS slice, updated, then deleted;
	// and a Service of an old suffix, deleted.
	svc, err := svcs.Create(ctx, headless("foo-global", ourLabels("foo")), metav1.CreateOptions{})
	testkit.Must(t, err)
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP})
	_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
	testkit.Must(t, err)
	westSlice := ourSlice("foo-global-west-ipv4-0", "foo", "globaldns.io/source-cluster", "west")
	westSlice.Annotations = map[string]string{"mirror.linkerd.io/remote-gateway-identity": "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.west",
		"mirror.linkerd.io/remote-svc-fq-name": "foo.db.svc.cluster.local"}
	global, err := eps.Create(ctx, westSlice, metav1.CreateOptions{})
	testkit.Must(t, err)
	global.Endpoints[0].Hostname = ptr.To("foo-0-west")
	_, err = eps.Update(ctx, global, metav1.UpdateOptions{})
	testkit.Must(t, err)
	testkit.Must(t, eps.Delete(ctx, "foo-global-west-ipv4-0", metav1.DeleteOptions{}))
	// An MCS slice it wrote with serviceImports on, deleted once it is off.
	mcsSlice := ourSlice("foo-mcs-west-ipv4-0", "foo", "multicluster.kubernetes.io/service-name", "foo")
	delete(mcsSlice.Labels, discoveryv1.LabelServiceName)
	_, err = admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, mcsSlice, metav1.CreateOptions{})
	testkit.Must(t, err)
	testkit.Must(t, eps.Delete(ctx, "foo-mcs-west-ipv4-0", metav1.DeleteOptions{}))
	testkit.Must(t, svcs.Delete(ctx, "foo-global", metav1.DeleteOptions{}))
	// Its warning on a Service in the way of one of its names.
	_, err = sa.CoreV1().Events(ns).Create(ctx, event(ns, "db-global.conflict", corev1.EventTypeWarning, "GlobalServiceConflict", foreign.Name), metav1.CreateOptions{})
	testkit.Must(t, err)
	_, err = admin.CoreV1().Services(ns).Create(ctx, headless("foo-old", ourLabels("foo")), metav1.CreateOptions{})
	testkit.Must(t, err)
	testkit.Must(t, svcs.Delete(ctx, "foo-old", metav1.DeleteOptions{}))
}

// TestParamPoliciesMatchOnlyWritersSlices: the API server evaluates a policy with params once per
// param, and the owned policies' params are every Service (ServiceImport) of a slice's namespace.
// Matched on every slice, they made each EndpointSlice write of the cluster, kube-controller-
// manager's for every pod change among them, cost one evaluation per Service of its namespace
// (TestWriterOwnRateLimit's 2,000 tenant Services and slices took 4m15s to create instead of 4 s).
// Every such policy, of deploy/base and of the chart, matches only the slices a writer labels as
// its own: the writer's, whose every write carries globaldns.io/writer (coredns-global-write).
func TestParamPoliciesMatchOnlyWritersSlices(t *testing.T) {
	t.Parallel()
	_, base := kustomize(t, "deploy/base")
	_, chart := helmTemplate(t, helms(t)["helm4"], "--set", "writer.serviceImports=true")
	n := 0
	for source, objs := range map[string]map[string]*unstructured.Unstructured{"deploy/base": base, "the chart": chart} {
		for key, o := range objs {
			if o.GetKind() != "ValidatingAdmissionPolicy" {
				continue
			}
			if _, params, _ := unstructured.NestedMap(o.Object, "spec", "paramKind"); !params {
				continue
			}
			n++
			exprs, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConstraints", "objectSelector", "matchExpressions")
			if !slices.ContainsFunc(exprs, func(e any) bool {
				m, _ := e.(map[string]any)
				return m["key"] == "globaldns.io/writer" && m["operator"] == "Exists"
			}) {
				t.Errorf("%s's %s matches slices without globaldns.io/writer: %v", source, key, exprs)
			}
		}
	}
	if n != 3 { // base's owned policy, the chart's and its ServiceImports one
		t.Errorf("%d policies with params, want 3", n)
	}
}
