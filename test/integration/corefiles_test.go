package integration

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
)

// TestCorefilesStart starts every example Corefile and every ```corefile block of the READMEs, as
// written, against the control plane, and asks each for its zones' apex. Only listen ports are
// changed (to free ones), and relative file paths are resolved from the repository root, where a
// user runs them.
func TestCorefilesStart(t *testing.T) {
	root, err := filepath.Abs("../..")
	must(t, err)
	// A control plane of its own: the examples watch every namespace and write EndpointSlices.
	cp := harness.Start(t)
	examples := map[string]string{}
	files, err := filepath.Glob(filepath.Join(root, "corefile", "*.Corefile"))
	must(t, err)
	for _, f := range files {
		examples[strings.TrimPrefix(f, root+"/")] = readFile(t, f)
	}
	for _, doc := range []string{"README.md", "plugin/global/README.md"} {
		for i, block := range fencedBlocks(readFile(t, filepath.Join(root, doc)), "corefile") {
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
				eventually(t, zone+" SOA", func() error {
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
	globalLine = regexp.MustCompile(`(?m)^\s*global((?:\s+[^\s{]+)*)\s*\{?\s*$`)
	kubeBlock  = regexp.MustCompile(`(?m)^([ \t]*)kubernetes\b[^{\n]*\{[ \t]*$`)
)

// localize turns a Corefile into a harness template: free ports for the servers and for ready,
// health and prometheus, `root` set to the repository for relative file paths, and the control
// plane's kubeconfig for the kubernetes plugin, which outside a pod has no other way to the API
// (the global plugin reads $KUBECONFIG).
func localize(corefile, root string) string {
	corefile = kubeBlock.ReplaceAllStringFunc(corefile, func(line string) string {
		indent := kubeBlock.FindStringSubmatch(line)[1]
		return line + "\n" + indent + "    kubeconfig {{.Kubeconfig}}"
	})
	out := serverKey.ReplaceAllStringFunc(corefile, func(key string) string {
		return port.ReplaceAllString(strings.TrimSuffix(strings.TrimSpace(key), "{"), ":{{.Port}}") + "{\n    root " + root
	})
	return listenAddr.ReplaceAllStringFunc(out, func(line string) string {
		m := listenAddr.FindStringSubmatch(line)
		tmpl := map[string]string{"ready": "{{.Ready}}", "health": "{{.Health}}", "prometheus": "{{.Metrics}}"}[m[2]]
		return m[1] + m[2] + " " + tmpl + m[4]
	})
}

// zones returns the zones of the global plugin in corefile (global. when it names none, none
// when the Corefile does not use it, as the cluster DNS's forwarding block).
func zones(corefile string) []string {
	m := globalLine.FindStringSubmatch(corefile)
	if m == nil {
		return nil
	}
	if strings.TrimSpace(m[1]) == "" {
		return []string{"global."}
	}
	var out []string
	for _, z := range strings.Fields(m[1]) {
		out = append(out, dns.Fqdn(z))
	}
	return out
}
