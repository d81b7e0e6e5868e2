package index

import (
	"fmt"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]string{"all": "all", "nearest": "nearest", "nearest 1": "nearest", " nearest  3 ": "nearest 3", "nearest 1000": "nearest 1000"} {
		p, err := ParsePolicy(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "any", "nearest 0", "nearest -1", "nearest 1001", "nearest x", "nearest 2 3", "all 2", "NEAREST"} {
		if p, err := ParsePolicy(in); err == nil {
			t.Errorf("ParsePolicy(%q) = %v, want an error", in, p)
		}
	}
}

// Keep answers whole tiers, nearest first, until N records are in; an empty tier has no records
// to stop at, so the next one answers.
func TestPolicyKeep(t *testing.T) {
	tiers := func(ts ...uint8) []Record {
		out := make([]Record, len(ts))
		for i, t := range ts {
			out[i].Tier = t
		}
		return out
	}
	rs := tiers(0, 0, 1, 2, 2, 2, 3)
	for _, tc := range []struct {
		p    Policy
		rs   []Record
		want int
	}{
		{Policy{}, rs, 7},
		{Policy{Nearest: 1}, rs, 2},
		{Policy{Nearest: 2}, rs, 2},
		{Policy{Nearest: 3}, rs, 3},
		{Policy{Nearest: 4}, rs, 6},
		{Policy{Nearest: 7}, rs, 7},
		{Policy{Nearest: 100}, rs, 7},
		{Policy{Nearest: 1}, tiers(2, 2, 3), 2}, // tiers 0 and 1 empty: tier 2 answers
		{Policy{Nearest: 1}, nil, 0},
	} {
		if got := len(tc.p.Keep(tc.rs)); got != tc.want {
			t.Errorf("%v of %v: %d records, want %d", tc.p, fmt.Sprint(tc.rs), got, tc.want)
		}
	}
}
