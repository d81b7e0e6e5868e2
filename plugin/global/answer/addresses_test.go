package answer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/miekg/dns"
)

// TestTierEnd: over every run of tiers of up to 6 records (each record's tier at most one more
// than the last's), tierEnd finds the end of each record's tier as a scan of the records does.
func TestTierEnd(t *testing.T) {
	for n := 1; n <= 6; n++ {
		for steps := range 1 << (n - 1) { // bit k: record k+1 is of a farther tier than record k
			rs := make([]index.Record, n)
			for k := 1; k < n; k++ {
				rs[k].Tier = rs[k-1].Tier + uint8(steps>>(k-1)&1)
			}
			for i := range rs {
				want := i
				for want < n && rs[want].Tier == rs[i].Tier {
					want++
				}
				if got := tierEnd(rs, i); got != want {
					t.Fatalf("tiers %v: tierEnd(%d) = %d, want %d", tiersOf(rs), i, got, want)
				}
			}
		}
	}
}

func tiersOf(rs []index.Record) []uint8 {
	out := make([]uint8, len(rs))
	for i := range rs {
		out[i] = rs[i].Tier
	}
	return out
}

// TestFromList: fromList against the rotation's definition: each tier [i, j) from i + off%(j-i)
// on and around, the tiers in order, as many records as out holds.
func TestFromList(t *testing.T) {
	list := make([]dns.RR, 7)
	for i := range list {
		list[i] = &dns.A{Hdr: dns.RR_Header{Name: fmt.Sprint(i)}}
	}
	for steps := range 1 << 6 {
		rs := make([]index.Record, 7)
		for k := 1; k < 7; k++ {
			rs[k].Tier = rs[k-1].Tier + uint8(steps>>(k-1)&1)
		}
		for off := range 8 {
			var want []dns.RR
			for i := 0; i < len(rs); {
				j := tierEnd(rs, i)
				k := i + off%(j-i)
				want = append(append(want, list[k:j]...), list[i:k]...)
				i = j
			}
			for size := 1; size <= 7; size++ {
				out := make([]dns.RR, size)
				if fromList(out, list, rs, off); !slices.Equal(out, want[:size]) {
					t.Fatalf("tiers %v, off %d, %d records: got %v, want %v", tiersOf(rs), off, size, names(out), names(want[:size]))
				}
			}
		}
	}
}

// names are the owner names of rrs, in order.
func names(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, rr := range rrs {
		out[i] = rr.Header().Name
	}
	return out
}
