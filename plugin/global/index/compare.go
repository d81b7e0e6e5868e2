package index

import (
	"bytes"
	"cmp"
	"strings"
)

// compareRecords is the order of a service's records: ready first, then IPv4 before IPv6, tier,
// cluster, host and address.
func compareRecords(a, b Record) int {
	if c := trueFirst(a.Ready, b.Ready); c != 0 {
		return c
	}
	return compareEndpoints(a, b)
}

// trueFirst orders true before false.
func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// compareEndpoints is compareRecords without readiness: the order of records of one readiness.
// The sort of a big service is mostly this function: strings.Compare, not cmp.Compare (one
// comparison of the strings, not two), and records of one Origin share their cluster.
func compareEndpoints(a, b Record) int {
	if c := trueFirst(a.is4, b.is4); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Tier, b.Tier); c != 0 {
		return c
	}
	if a.Origin != b.Origin {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
	}
	if c := strings.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	return bytes.Compare(a.addr[:], b.addr[:])
}

// sameEndpoint reports whether a and b are equal, their placements compared by value.
func sameEndpoint(a, b *Endpoint) bool {
	if a.Local != b.Local && (a.Local == nil || b.Local == nil || *a.Local != *b.Local) {
		return false
	}
	x, y := a.clone(), b.clone()
	x.Local, y.Local = nil, nil
	return x == y
}
