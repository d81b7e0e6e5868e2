package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The pinned Helm CLIs that `make helm` builds from test/tools/helm3 and test/tools/helm4: the
// chart must work with both majors.
const (
	EnvHelm3Bin = "GLOBAL_HELM3_BIN"
	EnvHelm4Bin = "GLOBAL_HELM4_BIN"
)

// Helm returns the path of the Helm CLI named by env (EnvHelm3Bin or EnvHelm4Bin), or an error
// that says how to build it.
func Helm(env string) (string, error) {
	bin := os.Getenv(env)
	if bin == "" {
		return "", fmt.Errorf("%s is not set: run `make helm` (or `make test`), which builds Helm and sets it", env)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no Helm at %s: run `make helm` (or `make test`), which builds it", bin)
	}
	return bin, nil
}

// TryHelm runs the Helm CLI bin with args, against cp as its admin when cp is not nil, with
// Helm's own state (repositories, cache, plugins) in a temporary directory of t's, and returns
// its stdout, or an error with its stderr.
func TryHelm(t testing.TB, bin string, cp *ControlPlane, args ...string) (string, error) {
	if cp != nil {
		args = append(args, "--kubeconfig", cp.Kubeconfig)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
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
