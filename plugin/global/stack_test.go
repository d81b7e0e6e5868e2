//go:build !race

// The race detector's instrumentation deepens every frame: the stack is measured without it.

package global

import (
	"context"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// The stack a query may take below ServeDNS. CoreDNS v1.15.0 serves a UDP query on a new goroutine
// and calls ServeDNS some 0.8 KB deep in it (miekg/dns's serveUDPPacket and serveDNS, CoreDNS's
// Server.ServeDNS), its stack grown to 4 KB by then (miekg/dns's UnpackDomainName). The runtime
// grows a stack, by copying it whole, when a frame would come within 928 bytes of its end (its
// stack guard on linux/amd64): that leaves a plugin some 2.4 KB. Checked on a bin/coredns whose
// ServeDNS was deepened on purpose, under dnsperf: its CPU profile shows no copy (runtime.newstack
// below the plugin) when answering took 2,360 bytes as measured here, a copy per query at 2,440.
const (
	stackBudget = 2 << 10
	// An SRV answer keeps its targets on the stack (recordMaker.srv's buffer): it grows the stack
	// once, to 8 KB, against an allocation per answer; never twice.
	srvStackBudget = 6 << 10
)

// TestServeDNSStack fails when answering a name takes more stack than its budget: the server would
// copy its goroutine's stack on every such query, which costs more than the answer (a CPU profile
// of bin/coredns under dnsperf: 12 % of the CPU, the plugin's name 0.87 of whoami's throughput).
func TestServeDNSStack(t *testing.T) {
	g := newGlobal(t, source())
	g.Zones = []string{"global.", "near.global."}
	g.Policies = answer.PoliciesOf(map[string]index.Policy{"near.global.": {Nearest: 1}})
	z := zonedGlobal(t, contract.Sources{Node: true})
	z.Locator = benchLocator(t)
	// The measure itself first: a frame measures as its size, within what the runtime lets a frame
	// overrun its guard by (128 bytes) and a call of descend.
	if need := stackNeed(func() { kilobyteFrame() }); need < 1<<10-192 || need > 1<<10+192 {
		t.Fatalf("a 1 KB frame measures as %d bytes of stack", need)
	}
	for _, q := range []struct {
		name, qname string
		qtype       uint16
		g           *Global
		from        string
		budget      int
	}{
		{"service", "foo.db.global.", dns.TypeA, g, "", stackBudget},
		{"nearest", "foo.db.near.global.", dns.TypeA, g, "", stackBudget},
		{"short", "foo.global.", dns.TypeA, g, "", stackBudget},
		{"cluster", "west.foo.db.global.", dns.TypeA, g, "", stackBudget},
		{"pod", "foo-0.west.foo.db.global.", dns.TypeA, g, "", stackBudget},
		{"nodata", "foo.db.global.", dns.TypeTXT, g, "", stackBudget},
		{"nxdomain", "nope.db.global.", dns.TypeA, g, "", stackBudget},
		{"client", "zz.db.global.", dns.TypeA, z, "10.1.0.1", stackBudget},
		{"zonal", "za.pin._zone.zz.db.global.", dns.TypeA, z, "", stackBudget},
		{"srv", "_db._tcp.foo.db.global.", dns.TypeSRV, g, "", srvStackBudget},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.qname, q.qtype)
		w := &test.ResponseWriter{RemoteIP: q.from}
		serve := func() { q.g.ServeDNS(context.Background(), w, m) }
		serve() // what the first query makes (a service's placements, the memo's answer), made
		need := stackNeed(serve)
		t.Logf("%s: %d bytes", q.name, need)
		if need > q.budget {
			t.Errorf("%s: answering takes %d bytes of stack, more than %d", q.name, need, q.budget)
		}
	}
}

// stackNeed returns about how many bytes of stack f takes below its caller: the difference between
// how deep a call of nothing and a call of f can start before the goroutine's stack grows.
func stackNeed(f func()) int {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection could shrink a stack between calls
	return deepest(func() {}) - deepest(f)
}

// deepest returns the deepest a call of f can start, in bytes below the goroutine's first frame,
// without growing a stack grown beforehand to a fixed size.
func deepest(f func()) int {
	lo, hi := 0, 1<<10 // in calls of descend
	depth := 0
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if d, ok := fits(mid, f); ok {
			lo, depth = mid, d
		} else {
			hi = mid
		}
	}
	return depth
}

// fits returns how deep f starts when called levels calls of descend deep, and whether it runs
// without growing the stack in one of three tries: a goroutine preempted by a signal saves its
// registers on its stack.
func fits(levels int, f func()) (depth int, ok bool) {
	for range 3 {
		if depth, grew := startAt(levels, f); !grew {
			return depth, true
		}
	}
	return 0, false
}

// startAt calls f levels calls of descend deep in a new goroutine, its stack grown to 16 KB first,
// and returns how deep in bytes, and whether the stack grew (was moved) meanwhile.
func startAt(levels int, f func()) (depth int, grew bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		growStack()
		var top byte
		before := uintptr(unsafe.Pointer(&top))
		depth = int(before - descend(levels, f))
		grew = uintptr(unsafe.Pointer(&top)) != before
	}()
	<-done
	return depth, grew
}

// descend calls f levels calls deep, and returns the address of its deepest frame.
//
//go:noinline
func descend(levels int, f func()) uintptr {
	var here byte
	if levels == 0 {
		f()
		return uintptr(unsafe.Pointer(&here))
	}
	return descend(levels-1, f)
}

// kilobyteFrame takes a frame of 1 KB and some.
//
//go:noinline
func kilobyteFrame() byte {
	var b [1 << 10]byte
	return b[growIndex]
}

// growStack grows the goroutine's stack to 16 KB, more than any depth deepest tries.
//
//go:noinline
func growStack() byte {
	var b [10 << 10]byte
	return b[growIndex] // an index the compiler cannot know keeps the array
}

var growIndex = 0
