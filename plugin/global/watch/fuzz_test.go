package watch

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzIndex feeds arbitrary Service and EndpointSlice objects (as JSON, the way they reach a
// cache) through the conversion and into the index, and checks what DNS would read from it.
func FuzzIndex(f *testing.F) {
	mirror := `{"metadata":{"name":"foo-west","namespace":"db","labels":{"mirror.linkerd.io/mirrored-service":"true","mirror.linkerd.io/cluster-name":"west"},"annotations":{"mirror.linkerd.io/remote-svc-fq-name":"foo.db.svc.cluster.local"}},"spec":{"clusterIP":"None","ports":[{"name":"db","port":5432}]}}`
	local := `{"metadata":{"name":"foo","namespace":"db","labels":{"mirror.linkerd.io/exported":"true"}},"spec":{"clusterIP":"None","ports":[{"name":"db","port":5432}]}}`
	sliceJSON := func(fam string, eps ...string) string {
		return fmt.Sprintf(`[{"metadata":{"name":"s","namespace":"db","labels":{"kubernetes.io/service-name":"foo-west"}},"addressType":%q,"ports":[{"name":"db","port":15432}],"endpoints":[%s]}]`, fam, strings.Join(eps, ","))
	}
	many := make([]string, 1200)
	for i := range many {
		many[i] = fmt.Sprintf(`{"addresses":["10.%d.%d.1"],"hostname":"foo-%d"}`, i/250, i%250, i)
	}
	for _, seed := range []struct {
		svc, slices string
		mirror      bool
	}{
		{mirror, sliceJSON("IPv4", `{"addresses":["10.0.0.1"],"hostname":"foo-0"}`, `{"addresses":["10.0.0.2"],"hostname":"foo-1","conditions":{"ready":false}}`), true},
		{mirror, sliceJSON("IPv6", `{"addresses":["fd00::1"],"hostname":"foo-0"}`, `{"addresses":["::ffff:10.0.0.1"]}`), true},
		{mirror, sliceJSON("FQDN", `{"addresses":["foo.example.com"]}`), true},
		{mirror, sliceJSON("IPv4", `{"addresses":["10.0.0.1"]}`, `{"addresses":["10.0.0.1"],"hostname":"foo-0"}`, `{"addresses":["10.0.0.2"],"hostname":"foo-0"}`), true},
		{mirror, sliceJSON("IPv4", many...), true},
		{mirror, sliceJSON("IPv4", `{"addresses":["10.0.0.1"],"hostname":"`+strings.Repeat("h", 70)+`"}`, `{"addresses":["10.0.0.2"],"hostname":"Not_A.Label"}`), true},
		{strings.Replace(mirror, `"name":"db","port":5432`, `"port":5432`, 1), sliceJSON("IPv4", `{"addresses":["10.0.0.1"],"hostname":"foo-0"}`), true},
		{strings.Replace(mirror, `,"annotations":{"mirror.linkerd.io/remote-svc-fq-name":"foo.db.svc.cluster.local"}`, ``, 1), sliceJSON("IPv4", `{"addresses":["10.0.0.1"]}`), true},
		{strings.Replace(mirror, `"cluster-name":"west"`, `"cluster-name":"`+strings.Repeat("W", 70)+`"`, 1), sliceJSON("IPv4"), true},
		{strings.Replace(mirror, `"cluster-name":"west"`, `"cluster-name":"east"`, 1), sliceJSON("IPv4", `{"addresses":["10.0.0.1"]}`), true},
		{strings.Replace(mirror, `"clusterIP":"None"`, `"clusterIP":"10.96.0.1"`, 1), sliceJSON("IPv4", `{"addresses":["10.0.0.1"]}`), true},
		{local, strings.Replace(sliceJSON("IPv4", `{"addresses":["10.244.0.1"],"zone":"z1","nodeName":"n1","targetRef":{"kind":"Pod","name":"foo-0"}}`), "foo-west", "foo", 1), false},
	} {
		f.Add([]byte(seed.svc), []byte(seed.slices), seed.mirror)
	}
	topo := indextest.Topology()
	f.Fuzz(func(t *testing.T, svcJSON, slicesJSON []byte, isMirror bool) {
		var svc corev1.Service
		var objs []discoveryv1.EndpointSlice
		if json.Unmarshal(svcJSON, &svc) != nil || json.Unmarshal(slicesJSON, &objs) != nil {
			return
		}
		src := fromLocal
		if isMirror {
			src = fromMirror
		}
		tr := transform(src, nil)
		so, err := tr(&svc)
		if err != nil {
			t.Fatalf("transform failed: %v", err)
		}
		s, ok := so.(*service)
		if !ok || s.member == nil {
			return // a per-pod mirror, or no member
		}
		if errs := validation.IsDNS1123Label(s.global); len(errs) > 0 {
			t.Fatalf("global name %q: %v", s.global, errs)
		}
		if c := s.member.Cluster; !s.member.Local() && len(validation.IsDNS1123Label(c)) > 0 {
			t.Fatalf("cluster %q", c)
		}
		var sls []*index.Slice
		for i := range objs {
			o, err := tr(&objs[i])
			if err != nil {
				t.Fatalf("transform failed: %v", err)
			}
			if sl, ok := o.(*slice); ok && sl.slice != nil {
				sls = append(sls, sl.slice)
			}
		}
		mem := indextest.New()
		mem.Add(s.key(), s.member, sls...)
		g := topo.Build(s.key(), mem)
		if g == nil {
			if s.member.Cluster != topo.Local {
				t.Fatal("a member built no service")
			}
			return
		}
		checkService(t, g)
	})
}

// checkService checks what DNS relies on: views ordered and consistent, names DNS labels.
func checkService(t *testing.T, g *index.Service) {
	all := g.All()
	for i := 1; i < len(all.A); i++ {
		if all.A[i].Tier < all.A[i-1].Tier {
			t.Fatalf("A records out of tier order: %v", all.A)
		}
	}
	for fam, rs := range map[index.Family][]index.Record{index.IPv4: all.A, index.IPv6: all.AAAA} {
		for _, r := range rs {
			if !r.Ready || r.Family() != fam {
				t.Fatalf("the IPv%d view holds %+v", fam, r)
			}
		}
	}
	seen := map[string]bool{}
	for tg := range all.Targets() {
		for _, l := range []string{tg.Host, tg.Cluster} {
			if errs := validation.IsDNS1123Label(l); len(errs) > 0 {
				t.Fatalf("label %q of a target: %v", l, errs)
			}
		}
		id := tg.Cluster + "/" + tg.Host
		if seen[id] {
			t.Fatalf("target %s twice", id)
		}
		seen[id] = true
		if len(tg.A)+len(tg.AAAA) == 0 {
			t.Fatalf("target %s without addresses", id)
		}
		v, ok := g.Host(tg.Cluster, tg.Host)
		if !ok || len(v.A) != len(tg.A) || len(v.AAAA) != len(tg.AAAA) {
			t.Fatalf("Host(%s) does not find its target", id)
		}
	}
	if n := len(all.A) + len(all.AAAA); n > g.Records().Len() {
		t.Fatalf("%d ready records of %d", n, g.Records().Len())
	}
}
