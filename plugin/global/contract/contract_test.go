package contract

import (
	"net/netip"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestLine: a line written is read back as written, and a line read leniently keeps prose with
// the value before it.
func TestLine(t *testing.T) {
	l := Line{}.Add(KeySynced, true).Add(KeyServices, 2).Add(KeyVersion, "1.15.0+abc").Add(KeyTier, uint8(3))
	if s := l.String(); s != "synced=true services=2 version=1.15.0+abc tier=3" {
		t.Errorf("written %q", s)
	}
	if got := ParseLine(l.String()); !slices.Equal(got, l) {
		t.Errorf("read back %q, wrote %q", got, l)
	}
	p := ParseLine("exists=false: no global service db/nope")
	if len(p) != 1 || p.Get(KeyExists) != "false: no global service db/nope" {
		t.Errorf("%q", p)
	}
	p = ParseLine("synced=true services=2 future=x")
	if p.Get(KeyServices) != "2" || p.Get("future") != "x" || p.Has("nope") || !p.Has(KeySynced) {
		t.Errorf("%q", p)
	}
}

// read reads a stanza's option lines (each the option's name, then its arguments) from the
// defaults, with Set, then checks them (Check), as package stanza reads a Corefile's.
func read(lines [][]string) (Options, error) {
	o := Defaults()
	for _, l := range lines {
		if _, err := o.Set(l[0], l[1:]); err != nil {
			return o, err
		}
	}
	return o, o.Check()
}

// TestRead: the defaults, and each option the contract reads.
func TestRead(t *testing.T) {
	o, err := read(nil)
	if err != nil || !o.Writer || o.LeaseName != DefaultLeaseName || o.LeaseDuration != DefaultLeaseDuration ||
		o.LinksNamespace != DefaultLinksNamespace || !slices.Equal(o.Topology, DefaultTopology()) || !slices.Equal(o.Forwarders, DefaultForwarders()) {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	o, err = read([][]string{{"serviceimports", "on"}, {"namespaces", "db", "web"}, {"lease", "dns", "w"},
		{"lease_duration", "20s"}, {"locality", "east", "zone=a", "region=r", "rack=1"}, {"topology", "hostname", "zone", "cluster", "rack"},
		{"links_namespace", "links"}, {"client_locality", "pod", "ecs"}, {"client_ecs_from", "10.0.0.0/8", "dns/ecs"}, {"ttl", "5"}})
	if err != nil || !o.Writer || !o.ServiceImports || !slices.Equal(o.Namespaces, []string{"db", "web"}) || o.LeaseNamespace != "dns" ||
		o.LeaseName != "w" || o.LeaseDuration != 20*time.Second || o.LinksNamespace != "links" ||
		o.Localities["east"][ZoneKey] != "a" || o.Localities["east"][RegionKey] != "r" || o.Localities["east"]["rack"] != "1" ||
		!slices.Equal(o.Topology, []string{ZoneKey, "rack"}) || !o.ClientLocality.Pod || o.ClientLocality.Node ||
		!slices.Equal(o.ClientTopology, []string{HostnameKey, ZoneKey, ClusterKey, "rack"}) ||
		!slices.Equal(o.ECSNetworks, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}) || !slices.Equal(o.ECSServices, []string{"dns/ecs"}) {
		t.Errorf("%+v, %v", o, err)
	}
	// Read as the plugin checks them (the plugin's TestParseErrors has every error).
	for _, bad := range [][]string{{"lease", "one"}, {"lease_duration", "soon"}, {"locality", "east"}, {"links_namespace"},
		{"endpointslices", "maybe"}, {"namespaces", "Db"}, {"client_locality", "gps"}, {"topology"}, {"owner", "roles", "x"},
		{"client_ecs_from", "10.0.0.1/8"}, {"locality", "east", "zone"}} {
		if _, err := read([][]string{bad}); err == nil {
			t.Errorf("%q read", bad)
		}
	}
	// The rules across options (the plugin's TestParseErrors has their messages).
	for _, bad := range [][][]string{{{"serviceimports", "on"}, {"endpointslices", "off"}}, {{"client_forwarders", "kube-system/kube-dns"}},
		{{"client_locality", "ecs"}}, {{"client_locality", "node"}, {"client_ecs_from", "10.0.0.0/8"}},
		{{"owner", "namespaces", "x"}, {"endpointslices", "off"}}} {
		if _, err := read(bad); err == nil {
			t.Errorf("%q read", bad)
		}
	}
	if _, err := read([][]string{{"client_locality", "node"}, {"client_forwarders", "kube-system/kube-dns"}}); err != nil {
		t.Errorf("client_forwarders with client_locality: %v", err)
	}
}

// TestNeeds: the access each option needs, among them the Pods read of client_locality pod and
// the forwarders' slices outside the watched namespaces.
func TestNeeds(t *testing.T) {
	has := func(as []Access, s string) bool {
		return slices.ContainsFunc(as, func(a Access) bool { return a.String() == s })
	}
	o, _ := read([][]string{{"endpointslices", "off"}})
	if n := o.Needs(); len(n) != 4 || has(n, "list nodes (all namespaces)") {
		t.Errorf("the reads alone: %v", n)
	}
	o, _ = read([][]string{{"client_locality", "node"}})
	if n := o.Needs(); !has(n, "watch nodes (all namespaces)") || has(n, "list pods (all namespaces)") ||
		!has(n, "update leases.coordination.k8s.io coredns-global-writer (all namespaces)") {
		t.Errorf("client_locality node: %v", n)
	}
	o, _ = read([][]string{{"client_locality", "pod", "ecs"}, {"namespaces", "db"}, {"client_ecs_from", "10.0.0.0/8", "dns/ecs", "db/ecs"}})
	n := o.Needs()
	for _, want := range []string{"list pods (all namespaces)", "watch pods (all namespaces)", "list endpointslices.discovery.k8s.io in kube-system",
		"watch endpointslices.discovery.k8s.io in dns", "create events in db", "list services in db"} {
		if !has(n, want) {
			t.Errorf("client_locality pod ecs in db: no %q in %v", want, n)
		}
	}
	if has(n, "list services (all namespaces)") || has(n, "list endpointslices.discovery.k8s.io in db/ecs") {
		t.Errorf("client_locality pod ecs in db: %v", n)
	}
}

// TestRBACDoc: docs/rbac.md's rules grant everything the plugin needs with every option on, and
// nothing it does not need.
func TestRBACDoc(t *testing.T) {
	text, err := os.ReadFile("../../../docs/rbac.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)~~~ yaml\n(.*?)~~~").FindSubmatch(text)
	if block == nil {
		t.Fatal("docs/rbac.md has no yaml block")
	}
	type rule struct {
		APIGroups, Resources, ResourceNames, Verbs []string
	}
	var rules []rule
	if err := yaml.Unmarshal(block[1], &rules); err != nil || len(rules) < 5 {
		t.Fatalf("docs/rbac.md's rules: %v, %v", rules, err)
	}
	o, _ := read([][]string{{"serviceimports", "on"}, {"client_locality", "pod"}, {"owner", "clusterroles.rbac.authorization.k8s.io", "coredns-global-write"}})
	needs := append(append(o.Needs(), o.LinksRead()...), TopologyReads()...)
	granted := func(a Access) bool {
		return slices.ContainsFunc(rules, func(r rule) bool { return a.GrantedBy(r.APIGroups, r.Resources, r.ResourceNames, r.Verbs) })
	}
	for _, a := range needs {
		if !granted(a) {
			t.Errorf("docs/rbac.md grants no %s", a)
		}
	}
	for i, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					a := Access{Verb: v, Group: g, Resource: res}
					if !slices.ContainsFunc(needs, func(n Access) bool {
						return n.Verb == v && n.Group == g && n.Resource == res && (len(r.ResourceNames) == 0) == (n.Name == "")
					}) {
						t.Errorf("docs/rbac.md rule %d grants %s, which nothing needs", i+1, a)
					}
				}
			}
		}
	}
}

// TestGrantedBy: an access is granted by a rule that lists its group, resource and verb, or "*"
// for any; a rule naming objects grants only an access of one of them, never a list of all.
func TestGrantedBy(t *testing.T) {
	get := Access{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Name: "w"}
	list := Access{Verb: "list", Resource: "services"}
	for _, c := range []struct {
		a                               Access
		groups, resources, names, verbs []string
		want                            bool
	}{
		{get, []string{"coordination.k8s.io"}, []string{"leases"}, nil, []string{"get"}, true},
		{get, []string{"*"}, []string{"*"}, nil, []string{"*"}, true},
		{get, []string{"coordination.k8s.io"}, []string{"leases"}, []string{"w"}, []string{"get", "update"}, true},
		{get, []string{"coordination.k8s.io"}, []string{"leases"}, []string{"other"}, []string{"get"}, false},
		{get, []string{""}, []string{"leases"}, nil, []string{"get"}, false},
		{get, []string{"coordination.k8s.io"}, []string{"endpoints"}, nil, []string{"get"}, false},
		{get, []string{"coordination.k8s.io"}, []string{"leases"}, nil, []string{"list"}, false},
		{list, []string{""}, []string{"services"}, nil, []string{"list", "watch"}, true},
		{list, []string{""}, []string{"services"}, []string{"foo"}, []string{"list"}, false},
	} {
		if got := c.a.GrantedBy(c.groups, c.resources, c.names, c.verbs); got != c.want {
			t.Errorf("%s by %v %v %v %v: %v, want %v", c.a, c.groups, c.resources, c.names, c.verbs, got, c.want)
		}
	}
}
