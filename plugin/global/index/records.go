package index

import (
	"iter"
	"sort"
	"sync"
)

// partSize is about how many records one part of a big service holds: a change copies the parts
// it touches and the list of parts, O(partSize + records/partSize), not the service's records.
const partSize = 128

// Records is a run of a service's records in answer order. A small service's are one array; a
// big one's are parts shared between its versions (see parts), and a run may span several.
type Records struct {
	flat   []Record // the records, when they are in one array
	ps     *parts   // else the parts of which records lo to hi are these
	lo, hi int32    // int32: small to pass around, and no service has 2^31 records
}

// parts are a big service's records, in immutable parts. Their records point at copies of their
// endpoints made with the part, so that a part outlives the slices its records came from and a
// record whose slice was replaced by an equal one need not be touched. One endpoint's records of
// one readiness and family are never split between parts: a Target or a Host view is in one.
type parts struct {
	recs   [][]Record
	starts []int32 // starts[i] is where recs[i] begins; one more: the number of records
}

// RecordsOf returns rs, records in answer order, as Records.
func RecordsOf(rs []Record) Records { return Records{flat: rs} }

// Flat returns the records in one array: theirs when they are in one, else a copy.
func (rs Records) Flat() []Record {
	if rs.ps == nil {
		return rs.flat
	}
	return rs.collect()
}

func (rs Records) collect() []Record {
	out := make([]Record, 0, rs.Len())
	for p := range rs.Parts() {
		out = append(out, p...)
	}
	return out
}

// Len returns the number of records.
func (rs Records) Len() int {
	return len(rs.flat) + int(rs.hi-rs.lo) // one of them is 0
}

// At returns the i-th record.
func (rs Records) At(i int) *Record {
	if rs.ps == nil {
		return &rs.flat[i]
	}
	return rs.ps.at(int(rs.lo) + i)
}

// at returns record g.
func (ps *parts) at(g int) *Record {
	p := ps.part(g)
	return &ps.recs[p][g-int(ps.starts[p])]
}

// Slice returns records i to j.
func (rs Records) Slice(i, j int) Records {
	if rs.ps == nil {
		return Records{flat: rs.flat[i:j:j]}
	}
	return rs.ps.slice(rs.lo, i, j)
}

// slice returns records lo+i to lo+j, as one array when they are in one part.
func (ps *parts) slice(lo int32, i, j int) Records {
	g, h := int(lo)+i, int(lo)+j
	if g == h {
		return Records{}
	}
	if p := ps.part(g); h <= int(ps.starts[p+1]) {
		s := int(ps.starts[p])
		return Records{flat: ps.recs[p][g-s : h-s : h-s]}
	}
	return Records{ps: ps, lo: int32(g), hi: int32(h)}
}

// next splits rs into its first array and the rest.
func (rs Records) next() ([]Record, Records) {
	if rs.ps == nil || rs.lo == rs.hi {
		return rs.flat, Records{}
	}
	p := rs.ps.part(int(rs.lo))
	s, e := rs.ps.starts[p], min(rs.hi, rs.ps.starts[p+1])
	return rs.ps.recs[p][rs.lo-s : e-s : e-s], Records{ps: rs.ps, lo: e, hi: rs.hi}
}

// Parts yields the records in order, an array at a time.
func (rs Records) Parts() iter.Seq[[]Record] {
	return func(yield func([]Record) bool) {
		for rs.Len() > 0 {
			var p []Record
			if p, rs = rs.next(); !yield(p) {
				return
			}
		}
	}
}

// All yields the records in order.
func (rs Records) All() iter.Seq[*Record] {
	return func(yield func(*Record) bool) {
		for p := range rs.Parts() {
			for i := range p {
				if !yield(&p[i]) {
					return
				}
			}
		}
	}
}

// search returns the first of records i to j for which f is true (j when none), f being false
// then true along them. In parts, it searches the parts' first records, then one part: a cold
// search misses a few cache lines, not one per step.
func (rs Records) search(i, j int, f func(*Record) bool) int {
	if rs.ps == nil {
		return i + sort.Search(j-i, func(k int) bool { return f(&rs.flat[i+k]) })
	}
	return rs.ps.search(int(rs.lo)+i, int(rs.lo)+j, f) - int(rs.lo)
}

func (ps *parts) search(g, h int, f func(*Record) bool) int {
	if g >= h {
		return h
	}
	p0, p1 := ps.part(g), ps.part(h-1)
	// The last part whose next one starts with a record f is true of, if any.
	p := p0 + sort.Search(p1-p0, func(i int) bool { return f(&ps.recs[p0+i+1][0]) })
	s := int(ps.starts[p])
	a, b := max(g, s), min(h, int(ps.starts[p+1]))
	recs := ps.recs[p]
	return a + sort.Search(b-a, func(i int) bool { return f(&recs[a-s+i]) })
}

// edit returns ps without records dels (indexes, sorted) and with records ins (sorted), each
// ins[i] before record pos[i] (len: after the last), and sets at[i] to where ins[i] is in the
// result. The parts no record leaves or joins are shared; the others, and small neighbours,
// made again.
func (ps *parts) edit(dels []int, ins []Record, pos, at []int) *parts {
	acc := accs.Get().(*[]Record)
	b := newPartsBuilder(int(ps.starts[len(ps.recs)]), (*acc)[:0])
	defer func() {
		if cap(b.acc) <= 8*partSize { // not one grown by a rare big edit
			*acc = b.acc[:0]
			clear((*acc)[:b.used]) // no pointers kept into parts
			accs.Put(acc)
		}
	}()
	d, f := 0, 0
	for p, recs := range ps.recs {
		start, end := int(ps.starts[p]), int(ps.starts[p+1])
		if (d == len(dels) || dels[d] >= end) && (f == len(ins) || pos[f] >= end) {
			b.share(recs)
			continue
		}
		for g := start; g < end; {
			next := end
			if d < len(dels) {
				next = min(next, dels[d])
			}
			if f < len(ins) {
				next = min(next, pos[f])
			}
			b.add(recs[g-start : next-start]...)
			if g = next; g == end {
				break
			}
			for ; f < len(ins) && pos[f] == g; f++ {
				at[f] = b.len()
				b.add(ins[f])
			}
			if d < len(dels) && dels[d] == g {
				d, g = d+1, g+1
			}
		}
	}
	for ; f < len(ins); f++ { // after the last record, or into none
		at[f] = b.len()
		b.add(ins[f])
	}
	return b.done()
}

// part returns the part that record g is in.
func (ps *parts) part(g int) int {
	return sort.Search(len(ps.recs), func(p int) bool { return int(ps.starts[p+1]) > g })
}

func (ps *parts) all() Records { return Records{ps: ps, hi: ps.starts[len(ps.recs)]} }

// sameRun reports whether a and b are records of one endpoint of one readiness and family: what
// no boundary between parts may separate.
func sameRun(a, b *Record) bool {
	return a.Ready == b.Ready && a.is4 == b.is4 && a.Host == b.Host && a.Cluster == b.Cluster
}

// partsBuilder makes parts from records in order: each part at least partSize/4 records (but
// the last), at most 2×partSize (but for one endpoint's run longer than that).
type partsBuilder struct {
	out  *parts
	acc  []Record // records not yet in a part
	used int      // the most records acc held: what to clear before reusing its array
	made bool     // the last part is one made here, not one shared: its end was not checked
}

func newPartsBuilder(n int, acc []Record) *partsBuilder {
	n = n/partSize + 2
	return &partsBuilder{out: &parts{recs: make([][]Record, 0, n), starts: make([]int32, 1, n+1)}, acc: acc}
}

// partsOf returns records rs, in order, in parts.
func partsOf(rs []Record) *parts { return newPartsBuilder(len(rs), rs).done() }

// accs hold the records of parts being made again: an edit's garbage is what it keeps.
var accs = sync.Pool{New: func() any { return new([]Record) }}

// share adds p, an existing part, unless the records before it are too few
// for a part of their own or end a run p continues: then p's records join them.
func (b *partsBuilder) share(p []Record) {
	b.reopen(&p[0], b.made) // a shared part follows another as it did: only a made one may need a look
	if len(b.acc) > 0 && (len(b.acc) < partSize/4 || sameRun(&b.acc[len(b.acc)-1], &p[0])) {
		b.push(p)
		b.flush(false)
		return
	}
	b.flush(true)
	b.emit(p)
	b.made = false
}

// add adds records in no part yet, in order.
func (b *partsBuilder) add(rs ...Record) {
	if len(rs) == 0 {
		return
	}
	b.reopen(&rs[0], true)
	if b.push(rs); len(b.acc) >= 4*partSize {
		b.flush(false)
	}
}

// reopen takes the last part back when it is too small to stay a part but the last, or, when
// run, when r, the next record, continues its last run (a new address of a host at its end).
func (b *partsBuilder) reopen(r *Record, run bool) {
	o := b.out
	if len(b.acc) > 0 || len(o.recs) == 0 {
		return
	}
	if last := o.recs[len(o.recs)-1]; len(last) < partSize/4 || run && sameRun(&last[len(last)-1], r) {
		o.recs, o.starts = o.recs[:len(o.recs)-1], o.starts[:len(o.starts)-1]
		b.push(last)
	}
}

// push appends rs to the records not yet in a part.
func (b *partsBuilder) push(rs []Record) {
	b.acc = append(b.acc, rs...)
	b.used = max(b.used, len(b.acc))
}

// flush makes parts of the records added: all of them when all, else those that make parts
// of partSize, leaving at least partSize.
func (b *partsBuilder) flush(all bool) {
	rest := b.acc
	for len(rest) >= 2*partSize || all && len(rest) > 0 {
		n := len(rest)
		if n >= 2*partSize {
			n = partSize
			for n < len(rest) && sameRun(&rest[n-1], &rest[n]) {
				n++
			}
		}
		recs, eps := make([]Record, n), make([]Endpoint, n)
		for i := range recs {
			recs[i], eps[i] = rest[i], rest[i].clone()
			recs[i].Endpoint = &eps[i]
		}
		b.emit(recs)
		rest, b.made = rest[n:], true
	}
	if len(rest) < len(b.acc) {
		b.acc = append(b.acc[:0], rest...) // its array kept for the next records
	}
}

func (b *partsBuilder) emit(recs []Record) {
	o := b.out
	o.recs = append(o.recs, recs)
	o.starts = append(o.starts, o.starts[len(o.starts)-1]+int32(len(recs)))
}

// len returns the number of records added.
func (b *partsBuilder) len() int { return int(b.out.starts[len(b.out.starts)-1]) + len(b.acc) }

// done returns the parts made.
func (b *partsBuilder) done() *parts {
	b.flush(true)
	return b.out
}

// run is a cluster's ready records (s.clusters[i]'s) in an answer, with their tier; for the local
// cluster, of the kinds of record of that tier (kindsOf). An answer's runs are nearest first: the
// local cluster's once per tier of its kinds.
type run struct {
	i     int
	tier  uint8
	local bool
	kinds uint8
}
