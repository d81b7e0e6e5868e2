package index

import (
	"cmp"
	"fmt"
	"slices"
	"unsafe"
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
	case got.Records().Len() != want.Records().Len():
		return fmt.Sprintf("%d records, want %d", got.Records().Len(), want.Records().Len())
	case got.v4 != want.v4 || got.ready != want.ready || got.depleted != want.depleted:
		return fmt.Sprintf("v4 %d ready %d depleted %v, want %d %d %v", got.v4, got.ready, got.depleted, want.v4, want.ready, want.depleted)
	case !slices.Equal(got.clusters, want.clusters):
		return fmt.Sprintf("clusters %v, want %v", got.clusters, want.clusters)
	case (got.inc == nil) != (want.inc == nil):
		return fmt.Sprintf("incremental %v, want %v", got.inc != nil, want.inc != nil)
	}
	for i := range got.Records().Len() {
		g, w := got.Records().At(i), want.Records().At(i)
		// Placements by value: a merge keeps an endpoint's record when only the pointer to its
		// placement changed.
		if !sameEndpoint(g.Endpoint, w.Endpoint) || g.Cluster != w.Cluster || !slices.Equal(g.Ports, w.Ports) || g.Tier != w.Tier || g.Gateway != w.Gateway {
			return fmt.Sprintf("record %d: %+v %+v, want %+v %+v", i, *g.Endpoint, *g, *w.Endpoint, *w)
		}
	}
	gw, ww := warnings(got), warnings(want)
	if !slices.Equal(gw, ww) {
		return fmt.Sprintf("warnings %q, want %q", gw, ww)
	}
	if !SameAnnotations(got, want) {
		return fmt.Sprintf("slice annotations %v, want %v", annotationsOf(got), annotationsOf(want))
	}
	if got.inc != nil {
		if !slices.Equal(got.inc.counts, want.inc.counts) {
			return fmt.Sprintf("counts %v, want %v", got.inc.counts, want.inc.counts)
		}
		// Each member's slices in the order the source gave them, as a build has them.
		for i := range got.inc.order {
			if !slices.Equal(orderOf(got.inc, i), orderOf(want.inc, i)) {
				return fmt.Sprintf("member %d's slices %v, want %v", i, orderOf(got.inc, i), orderOf(want.inc, i))
			}
		}
		return checkParts(got.inc)
	}
	return ""
}

// annotationsOf returns the slice annotations of each of s's member clusters.
func annotationsOf(s *Service) []Annotations {
	var out []Annotations
	for _, c := range s.clusters {
		if c.annotations == nil {
			out = append(out, nil)
			continue
		}
		out = append(out, *c.annotations)
	}
	return out
}

// orderOf returns member i's slices in inc's order.
func orderOf(inc *incremental, i int) []*Slice {
	var out []*Slice
	for _, o := range inc.order[i] {
		out = append(out, inc.slices[o])
	}
	return out
}

// checkParts describes how inc's parts break what they promise; "" when they do not.
func checkParts(inc *incremental) string {
	ps := inc.parts
	seen := make([]bool, len(inc.slices)) // each slice in its member's order once
	for i, ords := range inc.order {
		for _, o := range ords {
			if o < 0 || int(o) >= len(inc.slices) || inc.slices[o] == nil || inc.owners[o] != int32(i) || seen[o] {
				return fmt.Sprintf("member %d's order %v", i, ords)
			}
			seen[o] = true
		}
	}
	for o, sl := range inc.slices {
		if sl != nil && !seen[o] {
			return fmt.Sprintf("slice ordinal %d in no member's order", o)
		}
	}
	if d := partsRules(ps); d != "" {
		return d
	}
	for _, recs := range ps.recs {
		for i := range recs {
			r := &recs[i]
			sl := inc.slices[r.slice]
			if sl == nil {
				return fmt.Sprintf("a record of free slice ordinal %d", r.slice)
			}
			i := slices.IndexFunc(sl.Endpoints, func(e Endpoint) bool { return e.Host == r.Host && e.addr == r.addr })
			if i < 0 {
				return fmt.Sprintf("record %+v is not in its slice %d", *r.Endpoint, r.slice)
			}
			// Its endpoint's copy, or one its per-pod mirror made ready (gateway up) or not (down).
			if e := sl.Endpoints[i]; !sameEndpoint(&e, r.Endpoint) {
				up := r.Gateway == GatewayUp
				e.Ready, e.Serving = up, up
				if r.Gateway == GatewayUnknown || !sameEndpoint(&e, r.Endpoint) {
					return fmt.Sprintf("record %+v is not its slice's %+v", *r.Endpoint, sl.Endpoints[i])
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

// CheckViews describes how svc's views differ from its records filtered; "" when they do not.
// For a big service they are cut from its parts: this checks that without them.
func CheckViews(svc *Service) string {
	if svc == nil {
		return ""
	}
	flat := svc.Records().Flat()
	ready := flat[:svc.ready]
	v4 := int(svc.v4)
	type scope struct{ cluster, host string }
	want := map[scope]*View{} // by cluster ("" host) and by cluster and host
	add := func(k scope, r Record) {
		v := want[k]
		if v == nil {
			v = &View{}
			want[k] = v
		}
		if r.is4 {
			v.A = append(v.A, r)
		} else {
			v.AAAA = append(v.AAAA, r)
		}
	}
	for _, r := range ready {
		add(scope{r.Cluster, ""}, r)
		add(scope{r.Cluster, r.Host}, r)
	}
	same := func(a, b []Record) bool {
		return slices.EqualFunc(a, b, func(x, y Record) bool { return compareRecords(x, y) == 0 })
	}
	if all := svc.All(); !same(all.A, ready[:v4]) || !same(all.AAAA, ready[v4:]) {
		return fmt.Sprintf("All() has %d and %d records, want %d and %d", len(all.A), len(all.AAAA), v4, len(ready)-v4)
	}
	for k, w := range want {
		var got View
		var ok bool
		if k.host == "" {
			got, ok = svc.Cluster(k.cluster)
		} else {
			got, ok = svc.Host(k.cluster, k.host)
		}
		if !ok || !same(got.A, w.A) || !same(got.AAAA, w.AAAA) {
			return fmt.Sprintf("view of %+v: %d and %d records (%v), want %d and %d", k, len(got.A), len(got.AAAA), ok, len(w.A), len(w.AAAA))
		}
	}
	return ""
}

// partsRules describes how ps breaks the rules of parts; "" when it does not.
func partsRules(ps *parts) string {
	if len(ps.starts) != len(ps.recs)+1 || ps.starts[0] != 0 {
		return fmt.Sprintf("%d parts, %d starts", len(ps.recs), len(ps.starts))
	}
	for p, recs := range ps.recs {
		switch n := len(recs); {
		case int(ps.starts[p+1]-ps.starts[p]) != n:
			return fmt.Sprintf("part %d: %d records, starts %d", p, n, ps.starts[p+1]-ps.starts[p])
		case n == 0 || p < len(ps.recs)-1 && n < partSize/4:
			return fmt.Sprintf("part %d of %d has %d records", p, len(ps.recs), n)
		case n > 2*partSize && !sameRun(&recs[n-2*partSize], &recs[n-1]):
			return fmt.Sprintf("part %d has %d records", p, n)
		case p > 0 && sameRun(&ps.recs[p-1][len(ps.recs[p-1])-1], &recs[0]):
			return fmt.Sprintf("parts %d and %d split the records of %s", p-1, p, recs[0].Host)
		}
	}
	return ""
}

// PointsInto describes a record of svc, a big service, whose endpoint is in one of sls: its
// parts hold copies, so that no record keeps a replaced slice in memory. "" when none is.
func PointsInto(svc *Service, sls []*Slice) string {
	if svc == nil || svc.inc == nil {
		return ""
	}
	type span struct{ lo, hi uintptr } // of an array of endpoints; arrays never move
	spans := make([]span, 0, len(sls))
	for _, sl := range sls {
		if n := len(sl.Endpoints); n > 0 {
			lo := uintptr(unsafe.Pointer(&sl.Endpoints[0]))
			spans = append(spans, span{lo, lo + uintptr(n)*unsafe.Sizeof(Endpoint{})})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	for r := range svc.Records().All() {
		p := uintptr(unsafe.Pointer(r.Endpoint))
		i, _ := slices.BinarySearchFunc(spans, p, func(s span, p uintptr) int { return cmp.Compare(s.hi, p+1) })
		if i < len(spans) && spans[i].lo <= p {
			return fmt.Sprintf("record %+v points into a slice", *r.Endpoint)
		}
	}
	return ""
}

// CheckChanges describes how gone and came, what Changes said of prev and next, are not what
// changed: prev without gone and with came must be next, record by record and everything a
// reader sees of each, and no record may be in both (it did not change). "" when they are.
func CheckChanges(prev, next *Service, gone, came []Record) string {
	type recordKey struct {
		ready, is4, serving, terminating bool
		placed                           bool // Local is not nil
		tier                             uint8
		gateway                          Gateway
		cluster, host, ports             string
		addr                             [16]byte
		local                            Placement
	}
	key := func(r *Record) recordKey {
		k := recordKey{r.Ready, r.is4, r.Serving, r.Terminating, r.Local != nil, r.Tier, r.Gateway, r.Cluster, r.Host, PortsKey(r.Ports), r.addr, Placement{}}
		if r.Local != nil {
			k.local = *r.Local
		}
		return k
	}
	count := map[recordKey]int{}
	for r := range prev.Records().All() {
		count[key(r)]++
	}
	in := map[recordKey]bool{}
	for i := range gone {
		k := key(&gone[i])
		if count[k]--; count[k] < 0 {
			return fmt.Sprintf("gone %+v, which prev has not", k)
		}
		in[k] = true
	}
	for i := range came {
		k := key(&came[i])
		if in[k] {
			return fmt.Sprintf("%+v both gone and came", k)
		}
		count[k]++
	}
	for r := range next.Records().All() {
		count[key(r)]--
	}
	for k, n := range count {
		if n != 0 {
			return fmt.Sprintf("%+v: %+d records against next", k, n)
		}
	}
	return ""
}

// LargestLeaf returns how many names s's largest leaf holds, and leafMax.
func LargestLeaf(s *Snapshot) (int, int) {
	most := 0
	s.root.leaves(func(leaf shard) { most = max(most, len(leaf)) })
	return most, leafMax
}

// Remembered is how many answers svc remembers (memo.go).
func Remembered(svc *Service) int {
	p, n := svc.placed.Load(), 0
	for i := range p.memo.slots {
		if p.memo.slots[i].Load() != nil {
			n++
		}
	}
	return n
}
