package index

import "testing"

// TestShardFind: a leaf is searched by hash, then by name among the names of one hash, which a
// 64-bit hash makes rare but the deepest leaf must hold.
func TestShardFind(t *testing.T) {
	e := func(hash uint64, name string) entry {
		return entry{hash, []*Service{{Key: Key{Namespace: "db", Name: name}}}}
	}
	sh := shard{e(1, "a"), e(2, "c"), e(2, "b"), e(3, "d")}
	for _, c := range []struct {
		name  string
		hash  uint64
		at    int
		found bool
	}{
		{"a", 1, 0, true},
		{"c", 2, 1, true},
		{"b", 2, 2, true}, // after another name of its hash
		{"d", 3, 3, true},
		{"x", 2, 3, false}, // after the names of its hash: the leaf stays sorted by hash
		{"x", 0, 0, false},
		{"x", 4, 4, false},
		{"d", 2, 3, false}, // the name, under another hash
	} {
		if at, found := sh.find(c.name, c.hash); at != c.at || found != c.found {
			t.Errorf("find(%q, %d) = %d, %v; want %d, %v", c.name, c.hash, at, found, c.at, c.found)
		}
	}
}
