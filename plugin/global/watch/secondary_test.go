package watch

import "testing"

func TestSecondaryIndex(t *testing.T) {
	x := newSecondary(serviceOf)
	a := &slice{meta: meta{namespace: "db", name: "a"}, service: "foo"}
	b := &slice{meta: meta{namespace: "db", name: "b"}, service: "foo"}
	a2 := &slice{meta: meta{namespace: "db", name: "a", resourceVersion: "2"}, service: "foo"}
	x.update(a, true)
	x.update(b, true)
	held := x.get("db/foo")
	x.update(a2, true) // an update replaces, and never changes what a reader holds
	if got := x.get("db/foo"); len(got) != 2 || got[0] != a2 || got[1] != b || held[0] != a {
		t.Fatalf("after replace: %v (held %v)", got, held)
	}
	x.update(a2, false)
	x.update(b, false)
	if got := x.get("db/foo"); len(got) != 0 || len(x.by) != 0 {
		t.Fatalf("after delete: %v %v", got, x.by)
	}
	x.update(&slice{meta: meta{namespace: "db", name: "c"}}, true)   // no service label: not indexed
	x.update(&service{meta: meta{namespace: "db", name: "s"}}, true) // another type: ignored
	if len(x.by) != 0 {
		t.Fatalf("indexed %v", x.by)
	}
}
