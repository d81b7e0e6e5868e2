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

	"github.com/miekg/dns"
)

// TestReload: a Corefile reload (SIGUSR1) starts a new plugin instance before the old one shuts
// down. The new one must take over, with the new configuration, and keep following the API.
func TestReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	west, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns))
	fooNS := "foo." + ns + ".global."
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"])

	path := filepath.Join(c.Dir, "Corefile")
	testkit.Must(t, os.WriteFile(path, []byte(strings.Replace(readFile(t, path), "cluster east", "cluster east\n        ttl 7", 1)), 0o644))
	testkit.Must(t, c.Signal(syscall.SIGUSR1))
	harness.Eventually(t, "the reloaded instance answering", func() error {
		r := ask(t, c, "udp", fooNS, dns.TypeA)
		if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 7 {
			return fmt.Errorf("answer %v", r.Answer)
		}
		return nil
	})

	north, err := harness.CreateMirror(ctx, client(), mirror(ns, "north", true))
	testkit.Must(t, err)
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"], "A "+north.ClusterIPs["foo-0"])
	if logs := c.Logs(); strings.Contains(logs, "[ERROR]") || strings.Contains(logs, "panic") {
		t.Errorf("errors in the log:\n%s", logs)
	}
}
