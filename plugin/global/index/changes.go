package index

// Big reports whether s keeps its records in parts that its next versions share: then Changes
// tells what a change did to it without reading the rest.
func (s *Service) Big() bool { return s != nil && s.inc != nil }

// Changes returns the records next has that prev has not (came) and those prev has that next has
// not (gone), each in answer order, for two versions of one big global service (ok is false when
// one is not big). The parts they share are skipped whole, so after a merge this costs what
// changed; after a whole rebuild, what comparing them whole does. A record counts as the same
// when everything a reader sees of it is: its endpoint, cluster, ports and gateway state.
func Changes(prev, next *Service) (gone, came []Record, ok bool) {
	if !prev.Big() || !next.Big() || prev.Key != next.Key {
		return nil, nil, false
	}
	a, b := prev.inc.parts, next.inc.parts
	// A part is shared when both lists hold it: the same array, told by its first record.
	inA, inB := partSet(a), partSet(b)
	for _, p := range a.recs {
		if inB[&p[0]] != len(p) {
			gone = append(gone, p...)
		}
	}
	for _, p := range b.recs {
		if inA[&p[0]] != len(p) {
			came = append(came, p...)
		}
	}
	gone, came = dropSame(gone, came)
	return gone, came, true
}

// partSet maps the first record of each of ps's parts to the part's length.
func partSet(ps *parts) map[*Record]int {
	m := make(map[*Record]int, len(ps.recs))
	for _, p := range ps.recs {
		m[&p[0]] = len(p)
	}
	return m
}

// dropSame drops from sorted a and b the records that are in both, in place.
func dropSame(a, b []Record) ([]Record, []Record) {
	i, j, x, y := 0, 0, 0, 0 // read a[i], b[j]; kept a[:x], b[:y]
	for i < len(a) && j < len(b) {
		switch c := compareRecords(a[i], b[j]); {
		case c < 0:
			a[x], x, i = a[i], x+1, i+1
		case c > 0:
			b[y], y, j = b[j], y+1, j+1
		case sameRecord(&a[i], &b[j]):
			i, j = i+1, j+1
		default:
			a[x], b[y] = a[i], b[j]
			x, y, i, j = x+1, y+1, i+1, j+1
		}
	}
	x += copy(a[x:], a[i:])
	y += copy(b[y:], b[j:])
	return a[:x], b[:y]
}

// sameRecord reports whether a and b, records of one endpoint in one order, are the same to a
// reader: conditions, placement, cluster, ports and gateway state.
func sameRecord(a, b *Record) bool {
	return a.Gateway == b.Gateway && a.Cluster == b.Cluster && samePortValues(a.Ports, b.Ports) && sameEndpoint(a.Endpoint, b.Endpoint)
}

func samePortValues(a, b []Port) bool {
	if samePorts(a, b) {
		return true
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
