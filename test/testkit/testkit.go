// Package testkit holds the small helpers every test package of the repository uses, so that each
// is written once.
package testkit

import (
	"cmp"
	"slices"
	"testing"
)

// Must fails the test at once on a non-nil error.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// SameSet reports whether a and b hold the same elements, in any order.
func SameSet[T cmp.Ordered](a, b []T) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// Btoi is 1 for true and 0 for false, for counting.
func Btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
