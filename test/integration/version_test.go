package integration

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/globaldns/global/test/testkit"

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
		if v != released && compareSemver(v, before) <= 0 {
			t.Errorf("version %s does not sort after %s", v, before)
		}
	}
	// The order a tool tracking the chart sees, between builds and around a release.
	for _, pair := range [][2]string{{"0.1.0", "0.2.0-dev.9+g1a2b3c4"}, {"0.2.0-dev.9+gffff", "0.2.0-dev.10+g0000.dirty"}, {"0.2.0-dev.99+g1", "0.2.0"}} {
		if compareSemver(pair[0], pair[1]) >= 0 {
			t.Errorf("%s sorts after %s", pair[0], pair[1])
		}
	}
}

// compareSemver orders two versions by SemVer 2.0's precedence: the release numbers, then a
// release after its pre-releases, then the pre-release identifiers (numbers below words, numbers
// by value); build metadata (+...) does not count.
func compareSemver(a, b string) int {
	a, _, _ = strings.Cut(a, "+")
	b, _, _ = strings.Cut(b, "+")
	ar, apre, aok := strings.Cut(a, "-")
	br, bpre, bok := strings.Cut(b, "-")
	if c := compareIdentifiers(strings.Split(ar, "."), strings.Split(br, ".")); c != 0 || aok == bok {
		if c != 0 || !aok {
			return c
		}
		return compareIdentifiers(strings.Split(apre, "."), strings.Split(bpre, "."))
	}
	if aok {
		return -1
	}
	return 1
}

func compareIdentifiers(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		an, aerr := strconv.Atoi(a[i])
		bn, berr := strconv.Atoi(b[i])
		switch {
		case aerr == nil && berr == nil && an != bn:
			if an < bn {
				return -1
			}
			return 1
		case (aerr == nil) != (berr == nil):
			if aerr == nil {
				return -1
			}
			return 1
		case a[i] != b[i]:
			return strings.Compare(a[i], b[i])
		}
	}
	return len(a) - len(b)
}
