package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// writerUser is who bin/coredns is in these tests: a static token user named as deploy/base's
// ServiceAccount, in system:masters. RBAC lets it do anything; what limits it is deploy/base's
// admission policy, which TestMain installs, as it limits the ServiceAccount in a cluster. The
// tests' fixtures are written by the admin, whom the policy does not match.
const writerUser = "system:serviceaccount:coredns-global:coredns-global"

var writer = harness.Token{Token: randomToken(), User: writerUser, Groups: []string{"system:masters"}}

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
	return installPolicy(ctx, cp, rendered, writer.Token, "coredns-global-write")
}

// installPolicy applies the admission policies and bindings of the rendered objects to cp, and
// waits until policy (its name) denies the user of token a Service of no writer.
func installPolicy(ctx context.Context, cp *harness.ControlPlane, rendered, token, policy string) error {
	var docs []string
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return err
		}
		if strings.HasPrefix(head.Kind, "ValidatingAdmissionPolicy") {
			docs = append(docs, doc)
		}
	}
	if len(docs) != 2 {
		return fmt.Errorf("%d admission policies and bindings rendered, want 2:\n%s", len(docs), rendered)
	}
	if _, err := harness.TryKubectl(cp, strings.Join(docs, "\n---\n"), "apply", "--server-side", "-f", "-"); err != nil {
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
	deadline := time.Now().Add(patience)
	for {
		_, err := as.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{})
		switch {
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'"):
			return nil
		case err == nil:
			if err := cp.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("probe the policy %s: %w", policy, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the policy %s denies nothing after %v", policy, patience)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
			must(t, err)
			rendered = append(rendered, string(b))
		}
		must(t, installPolicy(context.Background(), cp, strings.Join(rendered, "\n---\n"), suffixWriters[suffix].Token, "coredns-global"+suffix+"-write"))
	})
	kubeconfig, err := cp.KubeconfigFor(suffixWriters[suffix].Token)
	must(t, err)
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

// TestWriterPolicy: deploy/base's admission policy (installed by TestMain) lets its ServiceAccount,
// impersonated here in system:masters so that RBAC allows everything, write nothing but what the
// writer writes: each foreign or misshapen write is denied with the policy's message, our own
// shapes are admitted.
func TestWriterPolicy(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: writerUser, Groups: []string{"system:masters"}}
	sa, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	admin := client()
	// The API server type-checks the policy's expressions against the resources' schemas.
	eventuallyWithin(t, 5*time.Second, "the policy's type check", func() error {
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
	// A foreign Service and its slice, as the endpointslice controller would write them.
	foreign, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "db"}, Ports: port}}, metav1.CreateOptions{})
	must(t, err)
	slice := func(name string, labels map[string]string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.66"}}},
			Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	}
	foreignSlice, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("db-abcde", map[string]string{
		discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}), metav1.CreateOptions{})
	must(t, err)
	headless := func(name string, labels map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: port}}
	}

	const (
		own      = "coredns-global writes only its own objects"
		shape    = "coredns-global writes only headless Services"
		selector = "coredns-global writes only Services without a selector or externalIPs"
		name     = "coredns-global writes only the Service <svc>-global of global service <svc>"
		slices   = "coredns-global writes only EndpointSlices managed by global.globaldns.io"
	)
	svcs, eps := sa.CoreV1().Services(ns), sa.DiscoveryV1().EndpointSlices(ns)
	denied := []struct {
		what, message string
		write         func() error
	}{
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
	}
	for _, c := range denied {
		err := c.write()
		want := "ValidatingAdmissionPolicy 'coredns-global-write' with binding 'coredns-global-write' denied request: " + c.message
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
	must(t, err)
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9187, Protocol: corev1.ProtocolTCP})
	_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
	must(t, err)
	global, err := eps.Create(ctx, slice("foo-global-west-ipv4-0", ourLabels("foo", discoveryv1.LabelServiceName, "foo-global",
		discoveryv1.LabelManagedBy, "global.globaldns.io", "globaldns.io/source-cluster", "west")), metav1.CreateOptions{})
	must(t, err)
	global.Endpoints[0].Hostname = ptr.To("foo-0-west")
	_, err = eps.Update(ctx, global, metav1.UpdateOptions{})
	must(t, err)
	_, err = eps.Create(ctx, slice("foo-mcs-west-ipv4-0", ourLabels("foo", "multicluster.kubernetes.io/service-name", "foo",
		discoveryv1.LabelManagedBy, "global.globaldns.io")), metav1.CreateOptions{})
	must(t, err)
	for _, name := range []string{"foo-global-west-ipv4-0", "foo-mcs-west-ipv4-0"} {
		must(t, eps.Delete(ctx, name, metav1.DeleteOptions{}))
	}
	must(t, svcs.Delete(ctx, "foo-global", metav1.DeleteOptions{}))
	_, err = admin.CoreV1().Services(ns).Create(ctx, headless("foo-old", ourLabels("foo")), metav1.CreateOptions{})
	must(t, err)
	must(t, svcs.Delete(ctx, "foo-old", metav1.DeleteOptions{}))
}
