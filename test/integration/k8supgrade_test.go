package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
)

// TestKubernetesUpgrade runs docs/install.md's steps after a Kubernetes upgrade on an API server
// that says it is the minor release after the newest tested (a proxy in front of the control
// plane's): the chart's helm install and helm upgrade are not refused, and linkerd global check
// warns of the untested release (gdns-k8s-version) without failing that check.
func TestKubernetesUpgrade(t *testing.T) {
	t.Parallel()
	own := harness.Start(t) // of its own: the release's cluster-scoped objects
	tested := strings.Fields(os.Getenv("GLOBAL_K8S_TESTED"))
	var major, minor int
	if _, err := fmt.Sscanf(tested[len(tested)-1], "v%d.%d.", &major, &minor); err != nil {
		t.Fatalf("GLOBAL_K8S_TESTED=%q: %v", tested, err)
	}
	upgraded := harness.StartUpgradedAPI(t, own, fmt.Sprintf("v%d.%d.0", major, minor+1))
	const doc = "docs/install.md"
	helm := helms(t)["helm4"]
	docNamespace(t, own, doc)
	harness.RunHelm(t, helm, nil, append(docCommand(t, doc, "helm install coredns-global "), "--kubeconfig", upgraded)...)
	harness.RunHelm(t, helm, nil, append(docCommand(t, doc, "helm upgrade coredns-global deploy/chart --namespace coredns-global --reset-then-reuse-values --set image.tag="), "--kubeconfig", upgraded)...)

	if !strings.Contains(readFile(t, repoPath(t, doc)), "\nlinkerd global check\n") {
		t.Fatalf("%s has no line `linkerd global check`", doc)
	}
	failed, _, _ := runCheck(t, nil, "--kubeconfig", upgraded, direct)
	const desc = "the Kubernetes version is one this release was tested on"
	if got := failed[desc]; !strings.HasPrefix(got, "warning: ") || !strings.Contains(got, fmt.Sprintf("%d.%d", major, minor+1)) {
		t.Errorf("linkerd global check, %q: %q, want a warning naming %d.%d", desc, got, major, minor+1)
	}
}
