package integration

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/globaldns/global/test/testkit"

	kubeversion "k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

// TestVersionSorts holds `make -s version`, CHANGELOG.md and the chart to one another, as
// docs/releasing.md states them: the chart in the repository is the changelog's latest release;
// a build is that release (at its tag) or the next minor release's pre-release numbered by the
// commits of its history, which sorts after the latest release and the previous one the upgrade
// test installs; the image's tag is the version with _ for +.
func TestVersionSorts(t *testing.T) {
	t.Parallel()
	heading := regexp.MustCompile(`(?m)^## (\d+)\.(\d+)\.(\d+)\b`).FindStringSubmatch(readFile(t, repoPath(t, "docs", "CHANGELOG.md")))
	if heading == nil {
		t.Fatal("docs/CHANGELOG.md has no release section (## X.Y.Z)")
	}
	released := strings.Join(heading[1:], ".")

	var chart struct{ Version, AppVersion string }
	testkit.Must(t, yaml.Unmarshal([]byte(readFile(t, repoPath(t, "deploy", "chart", "Chart.yaml"))), &chart))
	if chart.Version != released || chart.AppVersion != released {
		t.Errorf("deploy/chart/Chart.yaml: version %s, appVersion %s; the changelog's latest release is %s", chart.Version, chart.AppVersion, released)
	}

	v := makePrints(t, "version")
	if tag := makePrints(t, "image-tag"); tag != strings.ReplaceAll(v, "+", "_") {
		t.Errorf("make -s image-tag: %s, version %s", tag, v)
	}
	if v != released {
		minor, _ := strconv.Atoi(heading[2])
		out, err := exec.Command("git", "-C", repoPath(t), "rev-list", "--count", "HEAD").Output()
		testkit.Must(t, err)
		want := regexp.MustCompile(`^` + regexp.QuoteMeta(heading[1]+"."+strconv.Itoa(minor+1)+".0-dev."+strings.TrimSpace(string(out))+"+g") + `[0-9a-f]{4,}(\.dirty)?$`)
		if !want.MatchString(v) {
			t.Errorf("make -s version: %s, want %s", v, want)
		}
	}
	for _, before := range []string{released, os.Getenv("GLOBAL_PREVIOUS_VERSION")} {
		if v != released && compareSemver(t, v, before) <= 0 {
			t.Errorf("version %s does not sort after %s", v, before)
		}
	}
	// The order a tool tracking the chart sees, between builds and around a release.
	for _, pair := range [][2]string{{"0.1.0", "0.2.0-dev.9+g1a2b3c4"}, {"0.2.0-dev.9+gffff", "0.2.0-dev.10+g0000.dirty"}, {"0.2.0-dev.99+g1", "0.2.0"}} {
		if compareSemver(t, pair[0], pair[1]) >= 0 {
			t.Errorf("%s sorts after %s", pair[0], pair[1])
		}
	}
}

// compareSemver orders two versions by SemVer 2.0's precedence (build metadata does not count),
// failing the test on one that is not SemVer.
func compareSemver(t *testing.T, a, b string) int {
	t.Helper()
	v, err := kubeversion.ParseSemantic(a)
	testkit.Must(t, err)
	c, err := v.Compare(b)
	testkit.Must(t, err)
	return c
}
