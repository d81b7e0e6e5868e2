package index

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// TestEndpointClone: a copy of an endpoint is the endpoint, every field of it, but what a reader
// rendered of it (copying that would race with SetRendered); and two endpoints that differ only
// there are the same endpoint (sameEndpoint).
func TestEndpointClone(t *testing.T) {
	e := Endpoint{Host: "foo-0", Local: &Placement{Zone: "z1"}, Ready: true, Serving: true, Terminating: true}
	e.SetAddr(netip.MustParseAddr("10.0.0.1"))
	e.SetRendered(&Rendered{V: "record"})
	v := reflect.ValueOf(e)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the fixture leaves %s unset: set every field, so that clone is seen to copy it", v.Type().Field(i).Name)
		}
	}
	c := e.clone()
	if c.Rendered() != nil {
		t.Errorf("the copy has %v rendered", c.Rendered())
	}
	if !sameEndpoint(&e, &c) {
		t.Errorf("the copy %+v is not the endpoint %+v", c, e)
	}
	c.rendered = e.rendered
	if c != e {
		t.Errorf("the copy %+v differs from %+v", c, e)
	}
}

// TestPartsEdit edits parts at random (records leaving and joining, in runs and alone, hosts with
// several addresses) and checks each result against the same edit of a plain sorted list, and
// the parts' rules: sizes, no run split, each record pointing at its own part's endpoint copy.
func TestPartsEdit(t *testing.T) {
	origin := &Origin{Cluster: "east"}
	next := 0
	record := func(rng *rand.Rand, ready bool) Record {
		next++
		e := &Endpoint{Host: fmt.Sprintf("h-%05d", rng.IntN(2000)), Ready: ready}
		e.addr[0], e.addr[1], e.addr[2], e.is4 = byte(next>>16), byte(next>>8), byte(next), true
		return Record{Endpoint: e, Origin: origin}
	}
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 2))
		var want []Record
		for range 1000 + rng.IntN(2000) {
			want = append(want, record(rng, rng.IntN(10) > 0))
		}
		slices.SortFunc(want, compareRecords)
		ps := partsOf(slices.Clone(want))
		for step := range 200 {
			var dels []int
			for range rng.IntN(8) {
				dels = append(dels, rng.IntN(len(want)))
			}
			if rng.IntN(10) == 0 { // a run of records, a part's worth or more
				from := rng.IntN(len(want))
				for i := from; i < min(len(want), from+rng.IntN(3*partSize)); i++ {
					dels = append(dels, i)
				}
			}
			slices.Sort(dels)
			dels = slices.Compact(dels)
			var ins []Record
			for range rng.IntN(8) {
				ins = append(ins, record(rng, rng.IntN(2) == 0))
			}
			if rng.IntN(10) == 0 { // another address of a host already there
				r := record(rng, want[0].Ready)
				r.Endpoint.Host = want[0].Host
				ins = append(ins, r)
			}
			slices.SortFunc(ins, compareRecords)
			pos := make([]int, len(ins))
			for i := range ins {
				pos[i], _ = slices.BinarySearchFunc(want, ins[i], compareRecords)
			}

			at := make([]int, len(ins))
			ps = ps.edit(dels, ins, pos, at)
			kept := slices.Clone(want)
			for i := len(dels) - 1; i >= 0; i-- {
				kept = slices.Delete(kept, dels[i], dels[i]+1)
			}
			want = append(kept, ins...)
			slices.SortStableFunc(want, compareRecords)

			got := ps.all().Flat()
			if len(got) != len(want) {
				t.Fatalf("seed %d step %d: %d records, want %d", seed, step, len(got), len(want))
			}
			for i := range got {
				if compareRecords(got[i], want[i]) != 0 || *got[i].Endpoint != *want[i].Endpoint {
					t.Fatalf("seed %d step %d: record %d is %+v, want %+v", seed, step, i, *got[i].Endpoint, *want[i].Endpoint)
				}
			}
			for i, g := range at {
				if *got[g].Endpoint != *ins[i].Endpoint {
					t.Fatalf("seed %d step %d: record %d placed at %d, which holds %+v", seed, step, i, g, *got[g].Endpoint)
				}
			}
			if d := partsRules(ps); d != "" {
				t.Fatalf("seed %d step %d: %s", seed, step, d)
			}
		}
	}
}
