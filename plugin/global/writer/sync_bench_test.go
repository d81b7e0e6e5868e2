package writer

import (
	"context"
	"slices"
	"strconv"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// BenchmarkSync is the writer's sync of a global service of 10,000 endpoints (slices of 100) after
// one endpoint's readiness changed: from its changes, as the writer does, and whole. The API is a
// stand-in that numbers versions and keeps nothing, and the cache is fed the written slice: what
// is measured is the writer's own work.
func BenchmarkSync(b *testing.B) {
	for _, from := range []string{"changes", "whole"} {
		b.Run("from="+from, func(b *testing.B) {
			src, k, m, topo, svc := bigGlobalService(100)
			r, client := newTestReconciler()
			store := r.store.scopes[""]
			version := 0
			client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				obj := written(a)
				if obj == nil {
					return false, nil, nil
				}
				version++
				switch o := obj.(type) {
				case *discoveryv1.EndpointSlice:
					o = o.DeepCopy()
					o.ResourceVersion = strconv.Itoa(version)
					if err := store.slices.GetStore().Update(o); err != nil {
						b.Fatal(err)
					}
					r.tracker.observe(o, false)
					return true, o, nil
				default:
					obj = obj.DeepCopyObject()
					if err := store.services.GetStore().Update(obj); err != nil {
						b.Fatal(err)
					}
					return true, obj, nil
				}
			})
			ctx := context.Background()
			if err := r.sync(ctx, k, svc); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				cur := slices.Clone(src.Slices(m))
				j := i % len(cur)
				f := *cur[j]
				f.Endpoints = slices.Clone(f.Endpoints)
				f.Endpoints[0].Ready = !f.Endpoints[0].Ready
				cur[j] = &f
				src.SetSlices(m, cur...)
				svc = topo.Rebuild(svc, k, src)
				if from == "whole" {
					r.plans.reset()
				}
				if err := r.sync(ctx, k, svc); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
