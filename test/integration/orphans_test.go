package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// orphansCorefile writes with the settings the orphan tests change: namespaces (%[1]s), the lease
// namespace (%[2]s) and more options (%[3]s).
const orphansCorefile = `global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        lease %[2]s writer
        cluster east
        %[3]s
    }
}
`

// ourObjects returns the Service svc in ns and its slices, as far as they are ours (our
// managed-by label): nil and none when there are none.
func ourObjects(t *testing.T, ns, svc string) (*corev1.Service, []discoveryv1.EndpointSlice) {
	t.Helper()
	ctx := context.Background()
	s, err := client().CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s = nil
	} else {
		testkit.Must(t, err)
	}
	list, err := client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," + discoveryv1.LabelManagedBy + "=global.globaldns.io"})
	testkit.Must(t, err)
	return s, list.Items
}

// writtenFor waits until ns holds our Service svc and one slice of it.
func writtenFor(t *testing.T, ns, svc string) {
	t.Helper()
	harness.Eventually(t, ns+"/"+svc+" written", func() error {
		if s, sl := ourObjects(t, ns, svc); s == nil || len(sl) != 1 {
			return fmt.Errorf("service %v, %d slices", s != nil, len(sl))
		}
		return nil
	})
}

// goneFor waits until ns holds neither our Service svc nor any slice of ours of it.
func goneFor(t *testing.T, ns, svc string) {
	t.Helper()
	harness.Eventually(t, ns+"/"+svc+" deleted", func() error {
		if s, sl := ourObjects(t, ns, svc); s != nil || len(sl) != 0 {
			return fmt.Errorf("still there: service %v, %d slices", s != nil, len(sl))
		}
		return nil
	})
}

// foreignObjects creates, in ns, objects this writer must never touch, and returns a function
// that reports any change to them: a Service and a slice with names like ours and none of our
// labels, and a Service with all of them but written by another writer (another lease).
func foreignObjects(t *testing.T, ns string, names ...string) func() {
	t.Helper()
	ctx := context.Background()
	rv := map[string]string{}
	for _, name := range names {
		svc, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Labels: map[string]string{"team": "theirs"}},
			Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
		}, metav1.CreateOptions{})
		testkit.Must(t, err)
		rv["service "+svc.Name] = svc.ResourceVersion
		es, err := client().DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-west-ipv4-7", Labels: map[string]string{
				discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "someone-else", "globaldns.io/global-service": "foo"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.2.3"}, Hostname: ptr.To("theirs")}},
		}, metav1.CreateOptions{})
		testkit.Must(t, err)
		rv["slice "+es.Name] = es.ResourceVersion
	}
	other, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "foo-elsewhere", Labels: map[string]string{
			"app.kubernetes.io/managed-by": "coredns-global", "globaldns.io/global-service": "foo", "globaldns.io/writer": "other.writer"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
	rv["service "+other.Name] = other.ResourceVersion
	return func() {
		t.Helper()
		for what, was := range rv {
			kind, name, _ := strings.Cut(what, " ")
			var now string
			var err error
			if kind == "service" {
				var s *corev1.Service
				if s, err = client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					now = s.ResourceVersion
				}
			} else {
				var es *discoveryv1.EndpointSlice
				if es, err = client().DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
					now = es.ResourceVersion
				}
			}
			if err != nil || now != was {
				t.Errorf("%s in %s was touched: resourceVersion %s -> %q (%v)", what, ns, was, now, err)
			}
		}
	}
}

// TestWriterOrphansOfSuffix: a reload changes service_suffix; the objects written under the old
// one are deleted, found by their labels, and nothing else is. Each suffix is written as the
// writer of a release with that writer.serviceSuffix, whose admission policy admits its Services
// only, and deletes of any of ours: the -b writer deletes what the -a one wrote.
func TestWriterOrphansOfSuffix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	untouched := foreignObjects(t, ns, "foo-a", "foo-b")
	writerA, writerB := suffixWriter(t, "-a"), suffixWriter(t, "-b")
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(orphansCorefile, ns, ns, "service_suffix -a"), harness.WithKubeconfig(writerA))
	writtenFor(t, ns, "foo-a")

	path := filepath.Join(c.Dir, "Corefile")
	corefile := strings.Replace(readFile(t, path), "service_suffix -a", "service_suffix -b", 1)
	testkit.Must(t, os.WriteFile(path, []byte(strings.Replace(corefile, writerA, writerB, 1)), 0o644))
	testkit.Must(t, c.Signal(syscall.SIGUSR1))
	writtenFor(t, ns, "foo-b")
	goneFor(t, ns, "foo-a")
	afterSync(t, c, ns, "foo-b-west-ipv4-0") // the sync that deleted foo-a has ended
	untouched()
	if !strings.Contains(c.Logs(), "writer: "+ns+"/foo: deleted Service "+ns+"/foo-a") {
		t.Errorf("the deletion of foo-a is not logged:\n%s", c.Logs())
	}
}

// TestWriterOrphansOfNamespace: a restart drops a namespace from `namespaces`; what was written
// there is deleted, what is in the namespace still watched stays as it is, and nothing else in
// the dropped namespace is touched.
func TestWriterOrphansOfNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kept, dropped := namespace(t), namespace(t)
	for _, ns := range []string{kept, dropped} {
		_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
		testkit.Must(t, err)
	}
	untouched := foreignObjects(t, dropped, "foo-global")
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(orphansCorefile, kept+" "+dropped, kept, ""))
	writtenFor(t, kept, "foo-global")
	writtenFor(t, dropped, "foo-global")
	before := versions(t, kept)
	c.Stop()

	c = harness.StartCoreDNS(t, cp, fmt.Sprintf(orphansCorefile, kept, kept, ""))
	goneFor(t, dropped, "foo-global")
	// The sweep logs what it deleted once it is done.
	harness.Eventually(t, "the sweep's report", func() error {
		if !strings.Contains(c.Logs(), "in namespaces no longer watched") {
			return fmt.Errorf("not logged")
		}
		return nil
	})
	untouched()
	if after := versions(t, kept); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the namespace still watched was written:\n%v\n%v", before, after)
	}
}

// TestWriterOffLeavesObjects: with `endpointslices off` nothing is written or deleted; what was
// written before stays, frozen, and a warning says so and how to delete it, which works.
func TestWriterOffLeavesObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	untouched := foreignObjects(t, ns, "foo-global")
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(orphansCorefile, ns, ns, ""))
	writtenFor(t, ns, "foo-global")
	before := versions(t, ns)
	c.Stop()

	c = harness.StartCoreDNS(t, cp, fmt.Sprintf(orphansCorefile, ns, ns, "endpointslices off"))
	var command string
	harness.Eventually(t, "the warning", func() error {
		for _, l := range strings.Split(c.Logs(), "\n") {
			if _, cmd, ok := strings.Cut(l, "delete them with: "); ok && strings.Contains(l, "[WARNING]") {
				command = cmd
				return nil
			}
		}
		return fmt.Errorf("no warning")
	})
	if after := versions(t, ns); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("written with endpointslices off:\n%v\n%v", before, after)
	}
	args := strings.Fields(command)
	if len(args) < 2 || args[0] != "kubectl" {
		t.Fatalf("the warning's command %q", command)
	}
	harness.RunKubectl(t, cp, "", args[1:]...)
	goneFor(t, ns, "foo-global")
	untouched()
}
