// Package docs tests the documentation as a reader follows it: every relative link and #anchor in
// the Markdown files resolves, and so does every docs/<file>.md#<anchor> that the chart's NOTES,
// the CLI or the plugin print.
package docs

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory.
func root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// tracked lists the repository's files matching the git pathspecs.
func tracked(t *testing.T, top string, pathspecs ...string) []string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"ls-files", "--"}, pathspecs...)...)
	cmd.Dir = top
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}

var (
	heading  = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)
	fence    = regexp.MustCompile("(?m)^ *(```|~~~)")
	mdLink   = regexp.MustCompile(`\]\(([^()\s]+(?:\([^()\s]*\))?[^()\s]*)(?: "[^"]*")?\)`)
	htmlID   = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	docsLink = regexp.MustCompile(`(?:\.\./)*docs/[a-z][a-z-]*\.md(?:#[a-z0-9_-]+)?`)
)

// slug is GitHub's anchor of a heading: lower case, markup and punctuation dropped but for hyphens
// and underscores, each space a hyphen.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// withoutCode drops fenced code blocks, where a # line is a comment, not a heading.
func withoutCode(text string) string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if !in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// anchors are a Markdown file's anchors: its headings' (a repeated one gets -1, -2, ... as on
// GitHub) and its explicit <a id>s.
func anchors(text string) map[string]bool {
	text = withoutCode(text)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		s := slug(stripLinks(m[1]))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range htmlID.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

// stripLinks keeps a heading's link texts, as GitHub's anchor does.
func stripLinks(s string) string {
	return regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(s, "$1")
}

// resolver checks link targets against the repository's files, reading each Markdown file once.
type resolver struct {
	top     string
	anchors map[string]map[string]bool
}

// resolve reports what is wrong with target, a link from file from (both relative to the top), or "".
func (r *resolver) resolve(from, target string) string {
	p, anchor, _ := strings.Cut(target, "#")
	file := from
	if p != "" {
		file = path.Join(path.Dir(from), p)
	}
	if strings.HasPrefix(file, "../") {
		return "points outside the repository"
	}
	st, err := os.Stat(filepath.Join(r.top, filepath.FromSlash(file)))
	if err != nil {
		return "no such file"
	}
	if anchor == "" {
		return ""
	}
	if st.IsDir() || !strings.HasSuffix(file, ".md") {
		return "an anchor in what is not a Markdown file"
	}
	as, ok := r.anchors[file]
	if !ok {
		text, err := os.ReadFile(filepath.Join(r.top, filepath.FromSlash(file)))
		if err != nil {
			return err.Error()
		}
		as = anchors(string(text))
		r.anchors[file] = as
	}
	if !as[anchor] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", file, anchor)
	}
	return ""
}

// TestMarkdownLinks: every relative link of every Markdown file in the repository leads to a file
// that exists, and every #anchor to a heading of it.
func TestMarkdownLinks(t *testing.T) {
	top := root(t)
	r := &resolver{top: top, anchors: map[string]map[string]bool{}}
	files := tracked(t, top, "*.md")
	links := 0
	for _, file := range files {
		text, err := os.ReadFile(filepath.Join(top, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(string(text)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			if problem := r.resolve(file, target); problem != "" {
				t.Errorf("%s: link %s: %s", file, target, problem)
			}
		}
	}
	if len(files) < 10 || links < 50 {
		t.Errorf("%d Markdown files with %d relative links: the test reads too little", len(files), links)
	}
}

// TestPrintedDocLinks: every docs/<file>.md#<anchor> the chart's NOTES, the CLI (its messages and
// its checks' hints) and the plugin print resolves, as a reader at the top of the repository
// follows it.
func TestPrintedDocLinks(t *testing.T) {
	top := root(t)
	r := &resolver{top: top, anchors: map[string]map[string]bool{}}
	found := 0
	for _, file := range tracked(t, top, "deploy/chart/templates/NOTES.txt", "deploy/linkerd-global/*.go", "plugin/*.go", "deploy/monitoring/*.yaml", "deploy/chart/files/*") {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(top, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range docsLink.FindAllString(string(text), -1) {
			found++
			ref = strings.TrimLeft(ref, "./")
			if problem := r.resolve("README.md", ref); problem != "" {
				t.Errorf("%s prints %s: %s", file, ref, problem)
			}
		}
	}
	// The checks' hints: hintBase (docs/troubleshooting.md#) and each check's anchor.
	for _, file := range tracked(t, top, "deploy/linkerd-global/*.go") {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(top, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range hintAnchor.FindAllStringSubmatch(string(text), -1) {
			found++
			if problem := r.resolve("README.md", "docs/troubleshooting.md#"+m[1]); problem != "" {
				t.Errorf("%s: the hint of a check: %s", file, problem)
			}
		}
	}
	if found < 25 {
		t.Errorf("%d docs/ references printed: the test reads too little", found)
	}
}

// hintAnchor is a check's hint, an anchor of docs/troubleshooting.md (deploy/linkerd-global/checks_install.go).
var hintAnchor = regexp.MustCompile(`hintAnchor: +"([^"]+)"`)

// setValue is a Helm value flag and its argument, in a command a user copies.
var setValue = regexp.MustCompile(`--set(?:-string|-json|-file)?[ =](\S+)`)

// TestSetValuesQuoted: a --set value with brackets, braces or a star, as written in the docs, the
// chart's notes or the CLI's help, is quoted: unquoted, zsh (macOS's shell) stops on "no matches
// found", and bash expands {a,b} into two arguments.
func TestSetValuesQuoted(t *testing.T) {
	top := root(t)
	n := 0
	for _, file := range tracked(t, top, "*.md", "deploy/chart/templates/NOTES.txt", "deploy/linkerd-global/*.go", "deploy/chart/*.yaml") {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(top, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range setValue.FindAllStringSubmatch(string(text), -1) {
			n++
			v := m[1]
			if strings.HasPrefix(v, "...") {
				continue // a synopsis: [--set ...]
			}
			if strings.ContainsAny(v, "[]{}*?") && !strings.HasPrefix(v, "'") && !strings.HasPrefix(v, `"`) {
				t.Errorf("%s: %s: quote the value (zsh and bash read its brackets)", file, m[0])
			}
		}
	}
	if n < 10 {
		t.Errorf("%d --set flags: the test reads too little", n)
	}
}

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"3. Forward the zone from the cluster's DNS": "3-forward-the-zone-from-the-clusters-dns",
		"The CLI: `linkerd global`":                  "the-cli-linkerd-global",
		"`gdns-ns-exists`":                           "gdns-ns-exists",
		"Caches and clients":                         "caches-and-clients",
		"Ready, `/ready` and SERVFAIL":               "ready-ready-and-servfail",
		"foo_bar — baz":                              "foo_bar--baz",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
	as := anchors("# A\n## Same\n```sh\n# not a heading\n```\n### Same\n<a id=\"x-1\"></a>\n")
	for _, want := range []string{"a", "same", "same-1", "x-1"} {
		if !as[want] {
			t.Errorf("anchors: no %s in %v", want, as)
		}
	}
	if as["not-a-heading"] {
		t.Error("a comment in a code block made an anchor")
	}
}
