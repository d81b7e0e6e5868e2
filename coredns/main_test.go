package main

import (
	"slices"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
)

func TestDirectiveAfterKubernetes(t *testing.T) {
	got := directives(dnsserver.Directives)
	i := slices.Index(got, "global")
	if i < 1 || got[i-1] != "kubernetes" {
		t.Fatalf("global is at %d, after %q; want right after kubernetes", i, got[max(i-1, 0)])
	}
	if len(got) != len(dnsserver.Directives)+1 {
		t.Fatalf("got %d directives, want %d: only global is added", len(got), len(dnsserver.Directives)+1)
	}
	if err := dnsserver.SetDirectives(got); err != nil {
		t.Fatalf("CoreDNS rejects the order: %v", err)
	}
}
