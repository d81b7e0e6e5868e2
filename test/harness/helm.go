package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// What `make test` builds besides the control plane, and the variables that name them: the pinned
// Helm CLIs (test/tools/helm3, helm4: the chart must work with both majors), promtool
// (test/tools/promtool), the image tarball and the builder that wrote it (`make image`), and the
// resolver client the short-name test runs (test/integration/testdata/lookup, pure Go and cgo).
// No test runs a compiler: what it runs is built before, once.
const (
	EnvHelm3Bin     = "GLOBAL_HELM3_BIN"
	EnvHelm4Bin     = "GLOBAL_HELM4_BIN"
	EnvPromtoolBin  = "GLOBAL_PROMTOOL_BIN"
	EnvImageTar     = "GLOBAL_IMAGE_TAR"
	EnvImageBuilder = "GLOBAL_IMAGE_BUILDER"
	EnvLookupBin    = "GLOBAL_LOOKUP_BIN"
	EnvLookupCgoBin = "GLOBAL_LOOKUP_CGO_BIN"
)

// Built returns the path the variable env names, of what `make target` builds, or an error that
// says how to build it.
func Built(env, target string) (string, error) {
	path := os.Getenv(env)
	if path == "" {
		return "", fmt.Errorf("%s is not set: run `make %s` (or `make test`), which builds it and sets it", env, target)
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return "", fmt.Errorf("nothing at %s=%s: run `make %s` (or `make test`), which builds it", env, path, target)
	}
	return path, nil
}

// TryHelm runs the Helm CLI bin with args, against cp as its admin when cp is not nil, with
// Helm's own state (repositories, cache, plugins) in a temporary directory of t's, and returns
// its stdout, or an error with its stderr.
func TryHelm(t testing.TB, bin string, cp *ControlPlane, args ...string) (string, error) {
	if cp != nil {
		args = append(args, "--kubeconfig", cp.Kubeconfig)
	}
	home := t.TempDir()
	env := []string{"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"), "HELM_DATA_HOME=" + filepath.Join(home, "data")}
	return runTool("helm", bin, env, "", args...)
}

// RunHelm is TryHelm failing the test on an error.
func RunHelm(t testing.TB, bin string, cp *ControlPlane, args ...string) string {
	t.Helper()
	out, err := TryHelm(t, bin, cp, args...)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return out
}
