package index

import (
	"fmt"
	"slices"
)

// Merged reports whether svc was rebuilt by merging a change into prev (not whole).
func Merged(prev, svc *Service) bool {
	return prev != nil && svc != nil && svc.inc != nil && svc.inc.merged
}

// DiffServices describes how got differs from want in anything a reader sees (records, views,
// warnings, record counts) or a later rebuild uses; "" when it does not.
func DiffServices(got, want *Service) string {
	switch {
	case got == nil && want == nil:
		return ""
	case got == nil || want == nil:
		return fmt.Sprintf("got %v, want %v", got, want)
	case !slices.Equal(got.Members, want.Members):
		return fmt.Sprintf("members %v, want %v", got.Members, want.Members)
	case len(got.Records) != len(want.Records):
		return fmt.Sprintf("%d records, want %d", len(got.Records), len(want.Records))
	case got.v4 != want.v4 || got.ready != want.ready:
		return fmt.Sprintf("v4 %d ready %d, want %d %d", got.v4, got.ready, want.v4, want.ready)
	case !slices.Equal(got.clusters, want.clusters):
		return fmt.Sprintf("clusters %v, want %v", got.clusters, want.clusters)
	case (got.inc == nil) != (want.inc == nil):
		return fmt.Sprintf("incremental %v, want %v", got.inc != nil, want.inc != nil)
	}
	for i := range got.Records {
		g, w := &got.Records[i], &want.Records[i]
		if *g.Endpoint != *w.Endpoint || g.Cluster != w.Cluster || !slices.Equal(g.Ports, w.Ports) || g.Tier != w.Tier || g.Gateway != w.Gateway {
			return fmt.Sprintf("record %d: %+v %+v, want %+v %+v", i, *g.Endpoint, *g, *w.Endpoint, *w)
		}
	}
	gw, ww := warnings(got), warnings(want)
	if !slices.Equal(gw, ww) {
		return fmt.Sprintf("warnings %q, want %q", gw, ww)
	}
	if got.inc != nil {
		if !slices.Equal(got.inc.counts, want.inc.counts) {
			return fmt.Sprintf("counts %v, want %v", got.inc.counts, want.inc.counts)
		}
		if len(got.inc.all) != len(want.inc.all) || got.inc.dups != want.inc.dups {
			return fmt.Sprintf("%d records before dedupe (copies %v), want %d (%v)", len(got.inc.all), got.inc.dups, len(want.inc.all), want.inc.dups)
		}
		for _, r := range got.inc.all {
			sl := got.inc.slices[r.slice]
			if sl == nil {
				return fmt.Sprintf("a record of free slice ordinal %d", r.slice)
			}
			// A record points into its slice's endpoints, or holds a not-ready copy of a ready one
			// there (gateway down): never into a slice that was replaced, which it would keep in
			// memory.
			if !slices.Contains(pointers(sl.Endpoints), r.Endpoint) {
				i := slices.IndexFunc(sl.Endpoints, func(e Endpoint) bool { return e.Host == r.Host && e.addr == r.addr })
				if r.Gateway != GatewayDown || i < 0 || !(sl.Endpoints[i].Ready || sl.Endpoints[i].Serving) || r.Ready || r.Serving {
					return fmt.Sprintf("record %+v points outside its slice %d", *r.Endpoint, r.slice)
				}
			}
		}
	}
	return ""
}

// warnings is svc's warnings, sorted, without repeats.
func warnings(svc *Service) []string {
	var out []string
	for _, w := range svc.Warnings {
		out = append(out, w.Reason+": "+w.Detail)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func pointers(eps []Endpoint) []*Endpoint {
	out := make([]*Endpoint, len(eps))
	for i := range eps {
		out[i] = &eps[i]
	}
	return out
}
