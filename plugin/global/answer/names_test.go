package answer

import (
	"strings"
	"testing"
)

// TestLowerName: LowerName is strings.ToLower for every byte at every place of names of up to
// 17 bytes (two 8-byte words and a tail), and allocates nothing for a name in lower case.
func TestLowerName(t *testing.T) {
	for n := 1; n <= 17; n++ {
		for at := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a-0.z", 4)[:n])
				b[at] = byte(c)
				if s := string(b); LowerName(s) != strings.ToLower(s) {
					t.Fatalf("LowerName(%q) = %q, want %q", s, LowerName(s), strings.ToLower(s))
				}
			}
		}
	}
	name := "foo-0.west.foo.db.global."
	if n := testing.AllocsPerRun(100, func() { _ = LowerName(name) }); n != 0 {
		t.Errorf("LowerName(%q): %v allocations", name, n)
	}
}
