package watch

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func testPod(ns, name, node string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// The pod table follows a reflector: a Pod's IPs once assigned, relists, and deletions, where an IP
// that passed to a new Pod stays the new one's.
func TestPodTable(t *testing.T) {
	tab := newPodTable()
	tab.synced = func() {}
	nodeOf := func(ip string) string {
		n, _ := tab.node(netip.MustParseAddr(ip))
		return n
	}
	testkit.Must(t, tab.Replace([]any{testPod("a", "p0", "n1", "10.0.0.1", "fd00::1"), testPod("a", "p1", "n2")}, "1"))
	if nodeOf("10.0.0.1") != "n1" || nodeOf("fd00::1") != "n1" {
		t.Errorf("after the list: %q %q", nodeOf("10.0.0.1"), nodeOf("fd00::1"))
	}
	testkit.Must(t, tab.Update(testPod("a", "p1", "n2", "10.0.0.2"))) // its IP assigned
	if nodeOf("10.0.0.2") != "n2" {
		t.Errorf("assigned IP: %q", nodeOf("10.0.0.2"))
	}
	// p0 goes; its IP is taken by p2 before p0's deletion arrives.
	testkit.Must(t, tab.Add(testPod("b", "p2", "n3", "10.0.0.1")))
	testkit.Must(t, tab.Delete(cache.DeletedFinalStateUnknown{Key: "a/p0", Obj: testPod("a", "p0", "n1", "10.0.0.1", "fd00::1")}))
	if nodeOf("10.0.0.1") != "n3" || nodeOf("fd00::1") != "" {
		t.Errorf("an IP passed on: %q, the deleted pod's other: %q", nodeOf("10.0.0.1"), nodeOf("fd00::1"))
	}
	// A relist holds what is listed, nothing else.
	testkit.Must(t, tab.Replace([]any{testPod("a", "p1", "n2", "10.0.0.2")}, "2"))
	if nodeOf("10.0.0.1") != "" || nodeOf("10.0.0.2") != "n2" {
		t.Errorf("after a relist: %q %q", nodeOf("10.0.0.1"), nodeOf("10.0.0.2"))
	}
}

// BenchmarkPodTable is the pod source's heap per watched Pod: 100,000 Pods of one IP each on 1,000
// nodes, handed to the table as a reflector's initial list; live-B/pod is the live heap after a
// full GC.
func BenchmarkPodTable(b *testing.B) {
	const pods = 100000
	for range b.N {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		list := make([]any, pods) // garbage by the time after is read
		for i := range list {
			list[i] = testPod(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("pod-%d", i), fmt.Sprintf("node-%d", i%1000),
				fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256))
		}
		b.StartTimer()
		tab := newPodTable()
		tab.synced = func() {}
		if err := tab.Replace(list, "1"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		list = nil
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n, ok := tab.node(netip.MustParseAddr("10.100.0.7")); !ok || n != "node-7" {
			b.Fatalf("10.100.0.7 is on %q", n)
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/pods, "live-B/pod")
		runtime.KeepAlive(tab)
		b.StartTimer()
	}
}
