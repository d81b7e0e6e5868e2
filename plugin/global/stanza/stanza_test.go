package stanza

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/contract"

	"github.com/coredns/caddy/caddyfile"
)

// TestZones: a stanza's zones are its arguments, else its server block's keys as a Corefile
// writes them (transport, port and case aside), the root's being global., each once.
func TestZones(t *testing.T) {
	for _, tc := range []struct {
		corefile string
		zones    []string
	}{
		{".:53 {\n global\n}", []string{"global."}},
		{"global:5353 clusterset.local:5353 {\n global\n}", []string{"global.", "clusterset.local."}},
		{"dns://global:53 tls://global:853 {\n global\n}", []string{"global."}},
		{"Mesh.Example:53 {\n global\n}", []string{"mesh.example."}},
		{". mesh.example {\n global\n}", []string{"global.", "mesh.example."}},
		{".:53 {\n global near.global global\n}", []string{"near.global.", "global."}},
		{"a.example {\n global global\n}", []string{"global."}},
	} {
		s, err := Parse("Corefile", tc.corefile)
		if err != nil || !slices.Equal(s.Zones, tc.zones) {
			t.Errorf("%q: zones %v, %v; want %v", tc.corefile, s.Zones, err, tc.zones)
		}
	}
	for _, tc := range []struct{ corefile, want string }{
		{"_srv.example {\n global\n}", `Corefile:2 - Error during parsing: server block zone "_srv.example." is not a domain name made of DNS labels`},
		{". {\n global under_score.example\n}", `Corefile:2 - Error during parsing: zone "under_score.example." is not a domain name`},
		{". {\n global .\n}", `zone "." is not a domain name`},
		{". {\n forward . 1.1.1.1\n}", "Corefile has no global plugin"},
	} {
		if _, err := Parse("Corefile", tc.corefile); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.corefile, err, tc.want)
		}
	}
}

// TestRead: the contract's options from its defaults; each option once but locality and policy;
// the plugin's own options handed to Own with the zones, in order, and their errors located;
// without Own passed by; then the rules across options.
func TestRead(t *testing.T) {
	const corefile = `global:53 {
    global {
        ttl 30
        locality east zone=a
        locality west zone=b
        policy nearest
        policy all global
        namespaces db
        future_option x y
    }
}`
	s, err := Parse("Corefile", corefile)
	if err != nil || !slices.Equal(s.Namespaces, []string{"db"}) || len(s.Localities) != 2 || s.LeaseName != contract.DefaultLeaseName {
		t.Errorf("without Own: %+v, %v", s, err)
	}
	var own []string
	read := func(corefile string, fail string) (Stanza, error) {
		own = nil
		blocks, err := caddyfile.Parse("Corefile", strings.NewReader(corefile), nil)
		if err != nil {
			t.Fatal(err)
		}
		d := caddyfile.NewDispenserTokens("Corefile", blocks[0].Tokens[contract.Name])
		d.Next()
		return Read(&d, blocks[0].Keys, func(d *caddyfile.Dispenser, zones []string, opt string, args []string) error {
			own = append(own, strings.Join(append([]string{opt, zones[0]}, args...), " "))
			switch {
			case opt == fail:
				return errors.New(opt + " is bad")
			case opt == "future_option" && fail == "count":
				return contract.ErrArgCount
			}
			return nil
		})
	}
	if _, err := read(corefile, ""); err != nil || !slices.Equal(own, []string{"ttl global. 30", "policy global. nearest", "policy global. all global", "future_option global. x y"}) {
		t.Errorf("own options %q, %v", own, err)
	}
	for _, tc := range []struct{ corefile, fail, want string }{
		{corefile, "policy", "Corefile:6 - Error during parsing: policy is bad"},
		{corefile, "count", "Corefile:9 - Error during parsing: Wrong argument count or unexpected line ending after 'y'"},
		{". {\n global {\n  ttl 5\n  ttl 6\n }\n}", "", "Corefile:4 - Error during parsing: ttl given twice"},
		{". {\n global {\n  lease dns\n }\n}", "", "Corefile:3 - Error during parsing: Wrong argument count"},
		{". {\n global {\n  locality west zone=a\n  locality west zone=b\n }\n}", "", `Corefile:4 - Error during parsing: locality for cluster "west" given twice`},
		{". {\n global {\n  serviceimports on\n  endpointslices off\n }\n}", "", "Corefile:5 - Error during parsing: serviceimports on needs the writer"},
		{". {\n global {\n  client_forwarders kube-system/kube-dns\n }\n}", "", "Corefile:4 - Error during parsing: client_forwarders needs client_locality"},
	} {
		if _, err := read(tc.corefile, tc.fail); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q failing %q: error %v, want one starting %q", tc.corefile, tc.fail, err, tc.want)
		}
	}
}
