package writer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/index"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzHostnames checks the written endpoint hostnames for any set of (cluster, host) pairs the
// index can hold (both DNS labels): valid labels, unique within the service, the same every time;
// and that slice names are valid and parse back.
func FuzzHostnames(f *testing.F) {
	f.Add("west/foo-0\neast/foo-0\na-b/foo-0\nb/foo-0-a")
	f.Add(strings.Repeat("c", 63) + "/" + strings.Repeat("h", 63))
	f.Add("x/" + strings.Repeat("h", 61) + "\nx/" + strings.Repeat("h", 62))
	f.Fuzz(func(t *testing.T, pairs string) {
		var rs []index.Record
		for _, line := range strings.Split(pairs, "\n") {
			cluster, host, ok := strings.Cut(line, "/")
			if !ok || len(validation.IsDNS1123Label(cluster)) > 0 || len(validation.IsDNS1123Label(host)) > 0 {
				continue
			}
			rs = append(rs, index.Record{Endpoint: &index.Endpoint{Host: host}, Origin: &index.Origin{Cluster: cluster}})
		}
		names := hostnames(index.RecordsOf(rs))
		owner := map[string]clusterHost{}
		for k, n := range names {
			if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
				t.Fatalf("%v: %q: %v", k, n, errs)
			}
			if o, dup := owner[n]; dup {
				t.Fatalf("%q given to %v and %v", n, o, k)
			}
			owner[n] = k
		}
		if again := hostnames(index.RecordsOf(rs)); fmt.Sprint(again) != fmt.Sprint(names) {
			t.Fatal("not deterministic")
		}
		for _, r := range rs {
			g := group{r.Cluster, discoveryv1.AddressTypeIPv6}
			svc := r.Host + DefaultSuffix // any Service name
			name := sliceName(svc, g, 3)
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Fatalf("slice name %q: %v", name, errs)
			}
			if i, ok := sliceIndex(name, svc, g); !ok || i != 3 {
				t.Fatalf("slice name %q does not parse back", name)
			}
		}
	})
}
