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

// Kubectl returns the path of the pinned kubectl that `make controlplane` builds next to the
// control plane, or an error that says how to build it.
func Kubectl() (string, error) {
	dir := os.Getenv(EnvControlPlaneBin)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: run `make controlplane` (or `make test`), which builds kubectl and sets it", EnvControlPlaneBin)
	}
	path := filepath.Join(dir, "kubectl")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no kubectl in %s: run `make controlplane` (or `make test`), which builds it", dir)
	}
	return path, nil
}

// RunKubectl runs kubectl with args (and stdin, when not empty) against cp as its admin, or
// without a cluster when cp is nil, and returns its stdout; it fails the test on an error.
func RunKubectl(t testing.TB, cp *ControlPlane, stdin string, args ...string) string {
	t.Helper()
	out, err := TryKubectl(cp, stdin, args...)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return out
}

// TryKubectl is RunKubectl returning the error instead.
func TryKubectl(cp *ControlPlane, stdin string, args ...string) (string, error) {
	bin, err := Kubectl()
	if err != nil {
		return "", err
	}
	if cp != nil {
		args = append([]string{"--kubeconfig", cp.Kubeconfig}, args...)
	}
	return runTool("kubectl", bin, nil, stdin, args...)
}

// runTool runs bin, a command-line tool called name, with args, env added to the environment and
// stdin, and returns its stdout, or an error with the command line and its stderr.
func runTool(name, bin string, env []string, stdin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
