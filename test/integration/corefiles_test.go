package integration

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
)

// TestCorefilesStart starts every example Corefile and every ```corefile block of every Markdown
// file of the repository, as written, against the control plane, and asks each for its zones'
// apex. Only listen ports are changed (to free ones), `bind` addresses to 127.0.0.1, and relative
// file paths are resolved from the repository root, where a user runs them. A new document is covered without a change here.
func TestCorefilesStart(t *testing.T) {
	t.Parallel()
	root := repoPath(t)
	// A control plane of its own: the examples watch every namespace and write EndpointSlices.
	cp := harness.Start(t)
	examples := map[string]string{}
	files, err := filepath.Glob(filepath.Join(root, "corefile", "*.Corefile"))
	testkit.Must(t, err)
	for _, f := range files {
		examples[strings.TrimPrefix(f, root+"/")] = readFile(t, f)
	}
	docs := markdownFiles(t, root)
	for _, doc := range []string{"README.md", "plugin/global/README.md", "docs/install.md"} {
		if !slices.Contains(docs, doc) {
			t.Fatalf("the walk missed %s: %v", doc, docs)
		}
	}
	for _, doc := range docs {
		text := readFile(t, filepath.Join(root, doc))
		blocks := fencedBlocks(text, "corefile")
		// A fence the block pattern does not read (no closing fence, a stray character) would
		// leave its Corefile untested, silently.
		if n := len(corefileFence.FindAllString(text, -1)); n != len(blocks) {
			t.Errorf("%s: %d corefile fences, %d blocks read", doc, n, len(blocks))
		}
		for i, block := range blocks {
			examples[fmt.Sprintf("%s block %d", doc, i+1)] = block
		}
	}
	if len(files) < 3 || len(examples) < len(files)+3 {
		t.Fatalf("found only %d Corefiles: %v", len(examples), examples)
	}
	for name, corefile := range examples {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			tmpl := localize(corefile, root)
			c := harness.StartCoreDNS(t, cp, tmpl, harness.WithEnv("KUBECONFIG="+cp.Kubeconfig, "KUBERNETES_SERVICE_HOST="))
			for _, zone := range zones(corefile) {
				harness.Eventually(t, zone+" SOA", func() error {
					r := ask(t, c, "udp", zone, dns.TypeSOA)
					if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
						return fmt.Errorf("%s SOA: %s %v", zone, dns.RcodeToString[r.Rcode], r.Answer)
					}
					return nil
				})
			}
		})
	}
}

// markdownFiles returns the path, relative to root, of every Markdown file under root, outside
// hidden directories, bin/ (build output) and testdata/.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			out = append(out, filepath.ToSlash(rel))
			return err
		}
		return nil
	})
	testkit.Must(t, err)
	return out
}

// corefileFence is the opening fence of a corefile block.
var corefileFence = regexp.MustCompile("(?m)^[ \t]*(```|~~~) ?corefile[ \t]*$")

// fencedBlocks returns the bodies of the fenced code blocks (``` or ~~~) tagged lang.
func fencedBlocks(doc, lang string) []string {
	var out []string
	// Fences may be indented (blocks in list items).
	re := regexp.MustCompile("(?ms)^[ \t]*(```|~~~) ?" + lang + "\\s*\n(.*?)^[ \t]*(```|~~~)\\s*$")
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		out = append(out, dedent(m[2]))
	}
	return out
}

// dedent removes the indentation all non-empty lines of s share.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if t := strings.TrimLeft(l, " \t"); t != "" && (indent < 0 || len(l)-len(t) < indent) {
			indent = len(l) - len(t)
		}
	}
	for i, l := range lines {
		lines[i] = l[min(indent, len(l)-len(strings.TrimLeft(l, " \t"))):]
	}
	return strings.Join(lines, "\n")
}

var (
	serverKey  = regexp.MustCompile(`(?m)^(\S[^{\n]*?)\{\s*$`)
	port       = regexp.MustCompile(`:\d+`)
	listenAddr = regexp.MustCompile(`(?m)^(\s*)(ready|health|prometheus)(\s+\S*:\d+)?(\s*\{)?\s*$`)
	globalLine = regexp.MustCompile(`(?m)^[ \t]*global((?:[ \t]+[^\s{]+)*)[ \t]*\{?[ \t]*$`)
	kubeBlock  = regexp.MustCompile(`(?m)^([ \t]*)kubernetes\b[^{\n]*\{[ \t]*$`)
	bindLine   = regexp.MustCompile(`(?m)^([ \t]*)bind\b.*$`)
)

// localize turns a Corefile into a harness template: free ports for the servers and for ready,
// health and prometheus, `bind` to loopback (a node's link-local or service address is not this
// machine's), `root` set to the repository for relative file paths, and the control
// plane's kubeconfig for the kubernetes plugin, which outside a pod has no other way to the API
// (the global plugin reads $KUBECONFIG).
func localize(corefile, root string) string {
	corefile = kubeBlock.ReplaceAllStringFunc(corefile, func(line string) string {
		indent := kubeBlock.FindStringSubmatch(line)[1]
		return line + "\n" + indent + "    kubeconfig {{.Kubeconfig}}"
	})
	corefile = bindLine.ReplaceAllString(corefile, "${1}bind 127.0.0.1")
	out := serverKey.ReplaceAllStringFunc(corefile, func(key string) string {
		return port.ReplaceAllString(strings.TrimSuffix(strings.TrimSpace(key), "{"), ":{{.Port}}") + "{\n    root " + root
	})
	return listenAddr.ReplaceAllStringFunc(out, func(line string) string {
		m := listenAddr.FindStringSubmatch(line)
		tmpl := map[string]string{"ready": "{{.Ready}}", "health": "{{.Health}}", "prometheus": "{{.Metrics}}"}[m[2]]
		return m[1] + m[2] + " " + tmpl + m[4]
	})
}

// zones returns the zones of the global plugin in corefile, as setup reads them: its arguments,
// or without any its server block's zones, global. for the root; none when the Corefile does not
// use it, as the cluster DNS's forwarding block.
func zones(corefile string) []string {
	m := globalLine.FindStringSubmatchIndex(corefile)
	if m == nil {
		return nil
	}
	args := strings.Fields(corefile[m[2]:m[3]])
	if len(args) == 0 {
		// The server block is the last one opened before the directive.
		keys := serverKey.FindAllStringSubmatch(corefile[:m[0]], -1)
		if len(keys) == 0 {
			return []string{"global."}
		}
		for _, k := range strings.Fields(keys[len(keys)-1][1]) {
			if _, host, ok := strings.Cut(k, "://"); ok {
				k = host
			}
			if i := strings.LastIndex(k, ":"); i >= 0 {
				k = k[:i]
			}
			args = append(args, k)
		}
	}
	var out []string
	for _, z := range args {
		if z = dns.Fqdn(strings.ToLower(z)); z == "." {
			z = "global."
		}
		out = append(out, z)
	}
	return out
}
