package global

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
)

// TestContractReadsAsThePlugin: contract.Read, which the CLI reads a Corefile with, gives every
// option of the contract the value the plugin runs with, in the repository's example Corefiles,
// the READMEs' Corefile blocks and a block setting each of them. Both read them with
// contract.Options.Set; this holds the plugin's hand-over (adopt) and the CLI's splitting of a
// server block into lines (contract.Directives) to it.
func TestContractReadsAsThePlugin(t *testing.T) {
	corefiles := map[string]string{"every option": `.:53 {
global {
    serviceimports on
    namespaces db web
    links_namespace links
    lease dns writer
    lease_duration 20s
    locality east zone=a region=r rack=1
    locality west zone=b
    topology hostname zone cluster rack
    client_locality pod ecs
    client_forwarders kube-system/kube-dns dns/cache
    client_ecs_from 10.0.0.0/8 fd00::/8 dns/ecs
    owner namespaces coredns-global
}
}
`, "defaults": ".:53 {\n    global\n}\n", "no writer": ".:53 {\n    global {\n        endpointslices off\n    }\n}\n"}
	files, err := filepath.Glob("../../corefile/*.Corefile")
	if err != nil || len(files) < 3 {
		t.Fatalf("example Corefiles: %v, %v", files, err)
	}
	fence := regexp.MustCompile("(?s)```corefile\n(.*?)```")
	for _, doc := range []string{"../../README.md", "README.md", "../../docs/install.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range fence.FindAllStringSubmatch(string(text), -1) {
			corefiles[doc+" block "+string(rune('1'+i))] = m[1]
		}
	}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		corefiles[f] = string(text)
	}
	read := 0
	for name, text := range corefiles {
		for _, stanza := range globalStanzas(t, name, text) {
			c := caddy.NewTestController("dns", "")
			c.Dispenser = caddyfile.NewDispenserTokens(name, stanza)
			g, err := parseGlobal(c)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			o, err := contract.Read(optionLines(stanza))
			if err != nil {
				t.Errorf("%s: contract: %v", name, err)
				continue
			}
			if diff := contractDiff(g, &o); diff != "" {
				t.Errorf("%s: the contract reads %s", name, diff)
			}
			read++
		}
	}
	if read < 3+len(files) {
		t.Errorf("read %d global stanzas of %d Corefiles", read, len(corefiles))
	}
}

// globalStanzas returns the tokens of each `global` stanza of the Corefile text.
func globalStanzas(t *testing.T, name, text string) [][]caddyfile.Token {
	t.Helper()
	blocks, err := caddyfile.Parse(name, strings.NewReader(text), nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out [][]caddyfile.Token
	for _, b := range blocks {
		if ts := b.Tokens[contract.Name]; len(ts) > 0 {
			out = append(out, ts)
		}
	}
	return out
}

// optionLines are the option lines of a stanza's block, as the CLI reads them.
func optionLines(stanza []caddyfile.Token) [][]string {
	ts := make([]contract.Token, len(stanza))
	for i, t := range stanza {
		ts[i] = contract.Token{Text: t.Text, Line: t.Line}
	}
	return contract.Directives(contract.Name, ts)[0].Block
}

// contractDiff says where o differs from what g parsed, "" nowhere.
func contractDiff(g *Global, o *contract.Options) string {
	var diffs []string
	differs := func(what string, same bool) {
		if !same {
			diffs = append(diffs, what)
		}
	}
	differs("endpointslices", o.Writer == g.endpointSlices)
	differs("serviceimports", o.ServiceImports == g.writerConfig.ServiceImports)
	differs("namespaces", slices.Equal(o.Namespaces, g.namespaces))
	differs("links_namespace", o.LinksNamespace == g.linksNamespace)
	differs("lease", o.LeaseName == g.election.Name && (o.LeaseNamespace == "" || o.LeaseNamespace == g.election.Namespace))
	differs("lease_duration", o.LeaseDuration == g.election.Duration)
	differs("locality", maps.EqualFunc(o.Localities, g.corefile.Locality, maps.Equal))
	differs("topology", slices.Equal(o.Topology, g.corefile.Keys) && slices.Equal(o.ClientTopology, g.corefile.ClientKeys))
	sources := []bool{o.ClientSource(sourceECS), o.ClientSource(sourceNode), o.ClientSource(sourcePod)}
	differs("client_locality", slices.Equal(sources, []bool{g.sources.ecs, g.sources.node, g.sources.pod}))
	differs("client_forwarders", slices.Equal(o.Forwarders, g.forwarders))
	differs("client_ecs_from", slices.Equal(o.ECSNetworks, g.ecsFrom) && slices.Equal(o.ECSServices, g.ecsServices))
	differs("owner", o.Owner[0] == "" && g.writerConfig.GCOwner == nil ||
		g.writerConfig.GCOwner != nil && o.Owner == [2]string{g.writerConfig.GCOwner.Resource, g.writerConfig.GCOwner.Name})
	return strings.Join(diffs, ", ")
}
