package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/test/demo"
	"github.com/globaldns/global/test/testkit"
)

// TestDemo runs what `make run` runs, on a free port, and checks what it shows.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out strings.Builder
	d, err := demo.Start(ctx, demo.Options{Addr: freeAddr(t), Corefile: "../../corefile/demo.Corefile", Dir: t.TempDir(), Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	defer d.Stop()
	testkit.Must(t, d.WaitAnswers(ctx))
	var shown strings.Builder
	d.Show(&shown)
	// Local pods first, in an order that rotates.
	_, after, _ := strings.Cut(shown.String(), "A foo.global +short\n")
	if first := strings.Fields(after); len(first) < 3 || !testkit.SameSet(first[:3], []string{"10.244.1.10", "10.244.2.11", "10.244.1.12"}) {
		t.Errorf("the demo does not show the local pods first:\n%s", shown.String())
	}
	for _, want := range []string{
		"CH TXT foo.db.global +tcp +short\n  \"service=db/foo records=7 left-out=0 synced=true",
		"SRV _tcp-db._tcp.foo.db.global +short\n  0 33 5432 foo-0.east.foo.db.global.\n",
		"2 50 5432 foo-0.west.foo.db.global.\n",
		"3 50 5432 foo-1.north.foo.db.global.\n",
	} {
		if !strings.Contains(shown.String(), want) {
			t.Errorf("the demo does not show %q:\n%s", want, shown.String())
		}
	}
	// The explanation whole: a line for each of the 7 records, none cut off.
	_, why, _ := strings.Cut(shown.String(), "CH TXT foo.db.global +tcp +short\n")
	why, _, _ = strings.Cut(why, "\n$ ")
	if strings.Contains(why, "(truncated)") || strings.Count(why, "addr=") != 7 {
		t.Errorf("the demo's explanation is not whole:\n%s", why)
	}
	for _, rec := range []string{
		"host=foo-0 cluster=east tier=0", "host=foo-1 cluster=east tier=0", "host=foo-2 cluster=east tier=0",
		"host=foo-0 cluster=west tier=2", "host=foo-1 cluster=west tier=2",
		"host=foo-0 cluster=north tier=3", "host=foo-1 cluster=north tier=3",
	} {
		if !strings.Contains(why, rec) {
			t.Errorf("the demo's explanation has no line with %q:\n%s", rec, why)
		}
	}
}
