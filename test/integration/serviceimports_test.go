package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// serviceImportsCorefile writes and answers the MCS names itself, in clusterset.local, from the
// same index: %[1]s is the namespace, %[2]s the serviceimports line, %[3]s the lease.
const serviceImportsCorefile = `clusterset.local:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global clusterset.local {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        names mcs
        rotate off
        lease %[3]s
        %[2]s
        cluster east
        locality east zone=us-east-1a region=us-east-1
        locality west zone=us-east-1b region=us-east-1
        locality north zone=eu-north-1a region=eu-north-1
    }
}
`

// deployLease is the one Lease deploy/base's RBAC lets the plugin hold.
const deployLease = "coredns-global coredns-global-writer"

// stockCorefile is the cluster's own DNS: CoreDNS's kubernetes plugin with MCS support, reading
// the ServiceImports and MCS EndpointSlices.
const stockCorefile = `clusterset.local:{{.Port}} {
    bind 127.0.0.1
    kubernetes clusterset.local {
        kubeconfig {{.Kubeconfig}}
        namespaces %s
        multicluster clusterset.local
    }
}
`

// mcsSlices returns the EndpointSlices in ns labelled with an MCS service name, by name.
func mcsSlices(t *testing.T, c kubernetes.Interface, ns string) map[string]discoveryv1.EndpointSlice {
	t.Helper()
	l, err := c.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: mcsv1alpha1.LabelServiceName})
	testkit.Must(t, err)
	out := map[string]discoveryv1.EndpointSlice{}
	for _, es := range l.Items {
		out[es.Name] = es
	}
	return out
}

// TestServiceImports: with `serviceimports on`, the stock kubernetes plugin answers the MCS names
// as `names mcs` does; turned off, what was written goes and nothing else does. On a control plane
// of its own, with the mcs-api CRDs, written as the ServiceAccount of the chart rendered with
// writer.serviceImports and namespaces (its RBAC Roles in that namespace only, its admission
// policy), then turned off as docs/mcs.md says: keepServiceImportRules, then without.
func TestServiceImports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp := harness.Start(t)
	testkit.Must(t, cp.InstallMCSCRDs(ctx))
	admin := cp.Client
	mcs, err := mcsclient.NewForConfig(cp.Config)
	testkit.Must(t, err)

	// The writer has exactly the rendered RBAC, and is under the rendered policy.
	const ns = "mcs"
	for _, n := range []string{ns, "coredns-global"} {
		testkit.Must(t, harness.EnsureNamespace(ctx, admin, n))
	}
	verb := "install"
	release := func(values string) {
		harness.RunHelm(t, helms(t)["helm4"], cp, append([]string{verb, "coredns-global", chartPath(t, ""), "--namespace", "coredns-global",
			"--set", "namespaces={" + ns + "}," + values}, renderFlags(t)[:2]...)...)
		verb = "upgrade"
	}
	release("writer.serviceImports=true")
	tr, err := admin.CoreV1().ServiceAccounts("coredns-global").CreateToken(ctx, "coredns-global",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	saKubeconfig, err := cp.KubeconfigFor(tr.Status.Token)
	testkit.Must(t, err)
	localFooIn(t, admin, ns)
	_, err = harness.CreateMirror(ctx, admin, mirror(ns, "west", true, true))
	testkit.Must(t, err)
	down := mirror(ns, "north", true) // ready there, its gateway down: written ready: false
	down.GatewayDown = true
	_, err = harness.CreateMirror(ctx, admin, down)
	testkit.Must(t, err)
	// Another MCS implementation's objects: bar, and baz, which is also a global service here.
	_, err = harness.CreateMirror(ctx, admin, mirrorOf(ns, "baz", "west", true))
	testkit.Must(t, err)
	foreign := map[string]string{"app.kubernetes.io/managed-by": "another-mcs"}
	for _, name := range []string{"bar", "baz"} {
		_, err := mcs.MulticlusterV1alpha1().ServiceImports(ns).Create(ctx, &mcsv1alpha1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: foreign},
			Spec:       mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.Headless, Ports: []mcsv1alpha1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
		}, metav1.CreateOptions{})
		testkit.Must(t, err)
	}
	barSlice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "bar-elsewhere", Labels: map[string]string{
			mcsv1alpha1.LabelServiceName: "bar", mcsv1alpha1.LabelSourceCluster: "elsewhere", discoveryv1.LabelManagedBy: "another-mcs",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}, Hostname: ptr.To("bar-0")}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err = admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, barSlice, metav1.CreateOptions{})
	testkit.Must(t, err)
	foreignVersions := func() map[string]string {
		out := map[string]string{}
		l, err := mcs.MulticlusterV1alpha1().ServiceImports(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=another-mcs"})
		testkit.Must(t, err)
		for _, si := range l.Items {
			out["ServiceImport/"+si.Name] = si.ResourceVersion
		}
		es, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, barSlice.Name, metav1.GetOptions{})
		testkit.Must(t, err)
		out["EndpointSlice/"+es.Name] = es.ResourceVersion
		return out
	}
	before := foreignVersions()

	ours := harness.StartCoreDNS(t, nil, fmt.Sprintf(serviceImportsCorefile, ns, "serviceimports on", deployLease), harness.WithKubeconfig(saKubeconfig))
	stock := harness.StartCoreDNS(t, cp, fmt.Sprintf(stockCorefile, ns))
	zone := ".svc.clusterset.local."
	fooNS := "foo." + ns + zone

	t.Run("StockPluginAnswers", func(t *testing.T) {
		harness.Eventually(t, "the MCS slices", func() error {
			if n := len(mcsSlices(t, admin, ns)); n != 4 { // foo: east, west, north; bar's
				return fmt.Errorf("%d MCS slices, want 4", n)
			}
			return nil
		})
		names := []struct {
			qname string
			qtype uint16
		}{
			{fooNS, dns.TypeA},
			{fooNS, dns.TypeAAAA},
			{"_db._tcp." + fooNS, dns.TypeSRV},
			{fooNS, dns.TypeSRV},
			{"foo-0.east." + fooNS, dns.TypeA},
			{"foo-1.east." + fooNS, dns.TypeA},
			{"foo-2.east." + fooNS, dns.TypeA}, // not ready
			{"foo-0.west." + fooNS, dns.TypeA},
			{"foo-1.west." + fooNS, dns.TypeA},
			{"foo-0.north." + fooNS, dns.TypeA}, // gateway down
			{"_db._udp." + fooNS, dns.TypeSRV},
		}
		// The stock plugin reads the slices after they are written: wait for its first answer,
		// then every name must agree at once.
		harness.Eventually(t, "the stock plugin's answers", func() error {
			if got := comparable(ask(t, stock, "udp", fooNS, dns.TypeA)); len(got.answer) != 4 {
				return fmt.Errorf("stock plugin: %v", got)
			}
			return nil
		})
		for _, n := range names {
			for _, proto := range []string{"udp", "tcp"} {
				want := comparable(ask(t, ours, proto, n.qname, n.qtype))
				got := comparable(ask(t, stock, proto, n.qname, n.qtype))
				if got.String() != want.String() {
					t.Errorf("%s %s over %s:\nstock plugin %s\nnames mcs    %s", n.qname, dns.TypeToString[n.qtype], proto, got, want)
				}
				if n.qname == fooNS && n.qtype == dns.TypeA && len(want.answer) != 4 ||
					n.qname == "_db._tcp."+fooNS && len(want.answer) != 4 {
					t.Errorf("%s %s: %s, want 4 records", n.qname, dns.TypeToString[n.qtype], want)
				}
			}
		}

		// baz's ServiceImport is another implementation's: left alone, and its own -global
		// objects are written all the same.
		harness.Eventually(t, "baz-global", func() error {
			_, err := admin.CoreV1().Services(ns).Get(ctx, "baz-global", metav1.GetOptions{})
			return err
		})
		for name := range mcsSlices(t, admin, ns) {
			if strings.HasPrefix(name, "baz") {
				t.Errorf("an MCS slice %s beside someone else's ServiceImport baz", name)
			}
		}
		if after := foreignVersions(); !maps.Equal(after, before) {
			t.Errorf("foreign objects changed: %v, were %v", after, before)
		}
	})

	// The admission policy: the ServiceAccount may not write another implementation's ServiceImport,
	// nor one with our labels that is not the Headless import of its global service.
	sa := mcsclient.NewForConfigOrDie(restConfig(t, saKubeconfig))
	forbidden := []*mcsv1alpha1.ServiceImport{
		{ObjectMeta: metav1.ObjectMeta{Name: "qux", Labels: foreign}, Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.Headless}},
		{ObjectMeta: metav1.ObjectMeta{Name: "qux", Labels: ourLabels("qux")}, Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.ClusterSetIP, IPs: []string{"192.0.2.1"}}},
	}
	for _, si := range forbidden {
		si.Spec.Ports = []mcsv1alpha1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	}
	eventuallyInForce(t, "coredns-global-write", func(o metav1.CreateOptions) error {
		_, err := sa.MulticlusterV1alpha1().ServiceImports(ns).Create(ctx, forbidden[0], o)
		return err
	})
	for _, si := range forbidden {
		_, err := sa.MulticlusterV1alpha1().ServiceImports(ns).Create(ctx, si, metav1.CreateOptions{})
		if !deniedBy(err, "coredns-global-write") {
			t.Errorf("the ServiceAccount creates ServiceImport %v: %v", si.Labels, err)
		}
	}
	// Nor an MCS slice of ours naming another implementation's ServiceImport baz: the MCS DNS
	// would answer it (baz is a global service here too, which the writer leaves to its owner).
	saCore := kubernetes.NewForConfigOrDie(restConfig(t, saKubeconfig))
	forged := barSlice.DeepCopy()
	forged.Name, forged.Labels = "baz-forged", ourLabels("baz", mcsv1alpha1.LabelServiceName, "baz", discoveryv1.LabelManagedBy, "global.globaldns.io",
		corev1.IsHeadlessService, "")
	// The API server reads the policy's params (baz) from an informer of its own.
	eventuallyInForce(t, "coredns-global-write-owned-imports", func(o metav1.CreateOptions) error {
		_, err := saCore.DiscoveryV1().EndpointSlices(ns).Create(ctx, forged, o)
		return err
	})
	_, err = saCore.DiscoveryV1().EndpointSlices(ns).Create(ctx, forged, metav1.CreateOptions{})
	if !deniedBy(err, "coredns-global-write-owned-imports") || !strings.Contains(err.Error(), "coredns-global writes EndpointSlices only of the ServiceImports it wrote: baz is not one") {
		t.Errorf("the ServiceAccount writes an MCS slice of another's ServiceImport: %v", err)
	}

	t.Run("OffRemoves", func(t *testing.T) {
		ours.Stop()
		release("writer.keepServiceImportRules=true")
		ours = harness.StartCoreDNS(t, nil, fmt.Sprintf(serviceImportsCorefile, ns, "serviceimports off", deployLease), harness.WithKubeconfig(saKubeconfig))
		harness.Eventually(t, "our ServiceImport and MCS slices to go", func() error {
			l, err := mcs.MulticlusterV1alpha1().ServiceImports(ns).List(ctx, metav1.ListOptions{})
			testkit.Must(t, err)
			var imports []string
			for _, si := range l.Items {
				imports = append(imports, si.Name)
			}
			left := slices.Sorted(maps.Keys(mcsSlices(t, admin, ns)))
			if fmt.Sprint(imports, left) != "[bar baz] [bar-elsewhere]" {
				return fmt.Errorf("ServiceImports %v, MCS slices %v", imports, left)
			}
			return nil
		})
		if after := foreignVersions(); !maps.Equal(after, before) {
			t.Errorf("foreign objects changed: %v, were %v", after, before)
		}
		// Off, the policy admits no ServiceImport of ours either, only deletes.
		harness.Eventually(t, "the policy of serviceImports off", func() error {
			_, err := sa.MulticlusterV1alpha1().ServiceImports(ns).Create(ctx, &mcsv1alpha1.ServiceImport{
				ObjectMeta: metav1.ObjectMeta{Name: "foo", Labels: ourLabels("foo")},
				Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.Headless,
					Ports: []mcsv1alpha1.ServicePort{{Name: "db", Protocol: corev1.ProtocolTCP, Port: 5432}}},
			}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "coredns-global writes no ServiceImport without writer.serviceImports") {
				return fmt.Errorf("the ServiceAccount creates ServiceImport foo: %v", err)
			}
			return nil
		})
		// The -global objects stay, and so do the MCS names of `names mcs`.
		if _, err := admin.CoreV1().Services(ns).Get(ctx, "foo-global", metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
		eventuallyExpect(t, stock, fooNS, dns.TypeA, dns.RcodeNameError)
		if r := comparable(ask(t, ours, "tcp", fooNS, dns.TypeA)); len(r.answer) != 4 {
			t.Errorf("names mcs: %s", r)
		}
		// Then without the rules: the ServiceAccount may no longer read ServiceImports.
		release("writer.keepServiceImportRules=false")
		harness.Eventually(t, "the ServiceImport rules to go", func() error {
			if _, err := sa.MulticlusterV1alpha1().ServiceImports(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				return fmt.Errorf("list ServiceImports: %v", err)
			}
			return nil
		})
	})
}

// restConfig is the client configuration of a kubeconfig file.
func restConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	testkit.Must(t, err)
	return cfg
}

// TestServiceImportsWithoutCRD: the CRD not installed (the shared control plane never has it),
// `serviceimports on` says so once and writes nothing of the kind; the -global objects are written.
func TestServiceImportsWithoutCRD(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(serviceImportsCorefile, ns, "serviceimports on", ns+" writer"))
	harness.Eventually(t, "the -global slices", func() error {
		if _, sl := written(t, ns); len(sl) != 2 {
			return fmt.Errorf("%d slices, want east's and west's", len(sl))
		}
		return nil
	})
	// The sync that wrote them would have written the MCS slices too; and the CRD was looked for.
	harness.Eventually(t, "a sync and the gauge", func() error {
		if counter(t, c, syncedOK) < 1 || c.Metric(t, "coredns_global_writer_serviceimports_unavailable") != "1" {
			return fmt.Errorf("syncs %v, unavailable %q", counter(t, c, syncedOK), c.Metric(t, "coredns_global_writer_serviceimports_unavailable"))
		}
		return nil
	})
	if sl := mcsSlices(t, client(), ns); len(sl) != 0 {
		t.Errorf("MCS slices written: %v", slices.Collect(maps.Keys(sl)))
	}
	logs := c.Logs()
	if n := strings.Count(logs, "serviceimports.multicluster.x-k8s.io CRD is not installed"); n != 1 {
		t.Errorf("%d log lines about the missing CRD, want 1:\n%s", n, logs)
	}
	if strings.Contains(logs, "the server could not find the requested resource") {
		t.Errorf("a reflector on the missing ServiceImports:\n%s", logs)
	}
	testkit.Must(t, expect(t, c, "foo."+ns+".svc.clusterset.local.", dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10", "A 10.244.2.11",
		"A "+mirrorAddr(t, ns, "foo-0-west"), "A "+mirrorAddr(t, ns, "foo-1-west")))
}

// mirrorAddr is the ClusterIP of a per-pod mirror.
func mirrorAddr(t *testing.T, ns, name string) string {
	t.Helper()
	svc, err := client().CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	testkit.Must(t, err)
	return svc.Spec.ClusterIP
}

// answer is what two DNS servers must agree on: rcode, answer records as a set (targets, ports
// and addresses; not TTLs, SRV priorities or weights, which the stock plugin does not derive
// from tiers), and the addresses given for SRV targets.
type answer struct {
	rcode  int
	answer []string
	glue   []string
}

func comparable(m *dns.Msg) answer {
	a := answer{rcode: m.Rcode}
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			a.answer = append(a.answer, "A "+r.A.String())
		case *dns.AAAA:
			a.answer = append(a.answer, "AAAA "+r.AAAA.String())
		case *dns.SRV:
			a.answer = append(a.answer, fmt.Sprintf("SRV %d %s", r.Port, strings.ToLower(r.Target)))
		default:
			a.answer = append(a.answer, rr.String())
		}
	}
	for _, rr := range m.Extra {
		if r, ok := rr.(*dns.A); ok {
			a.glue = append(a.glue, strings.ToLower(r.Hdr.Name)+" A "+r.A.String())
		}
	}
	slices.Sort(a.answer)
	slices.Sort(a.glue)
	return a
}

func (a answer) String() string {
	return fmt.Sprintf("%s %v glue %v", dns.RcodeToString[a.rcode], a.answer, a.glue)
}
