package index

import "slices"

// Rebuild assembles the global service k again after a change; prev is what it was (nil: new).
// A big service whose members are the same is rebuilt from the slices and the per-pod mirrors
// that changed, merged into prev's sorted records (see update): a change costs what it changes,
// not the service's size.
func (t *Topology) Rebuild(prev *Service, k Key, src Source) *Service {
	s, slicesOf := t.members(k, src)
	if s == nil {
		return nil
	}
	var gens []uint64
	if prev != nil && prev.inc != nil && prev.topo == t && slices.Equal(prev.Members, s.Members) {
		w := len(s.Warnings)
		if gens = generations(s.Members, src); t.update(prev, s, slicesOf, src, gens) {
			s.finish(slicesOf)
			return s
		}
		s.Warnings = s.Warnings[:w] // made again by build
	}
	t.build(s, slicesOf, src, gens)
	s.finish(slicesOf)
	return s
}
