package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/globaldns/global/test/harness"
)

// compare holds every ServeDNS benchmark of this build to the commit of -compare, as an issue
// asking "nothing slower than where it started" measures it: both test binaries built here, run
// alternately, and their instructions per query, which do not drift with the machine.
func compare(ctx context.Context, _ *harness.ControlPlane, o options, r *report) error {
	bins, err := testBinaries(ctx, o, o.compare)
	if err != nil {
		return err
	}
	ns, err := alternate(ctx, bins, "ServeDNS/")
	if err != nil {
		return err
	}
	var shared []string
	for b := range ns["head"] {
		if len(ns["base"][b]) > 0 {
			shared = append(shared, b)
		}
	}
	if len(shared) == 0 {
		return fmt.Errorf("no ServeDNS benchmark shared with %s", o.compare)
	}
	slices.Sort(shared)
	s := section{
		title: "Every ServeDNS row against " + o.compare,
		intro: "`make bench BENCHFLAGS='-only compare -compare " + o.compare + " -out compare.md'`: `go test -c ./plugin/global/` at " + o.compare +
			" and at this build, then `-test.bench 'ServeDNS/' -test.benchtime 1s` of each, alternately, four rounds (ns/op, medians " +
			"and ranges), for every `ServeDNS` benchmark the two share; and the instructions per query of each (callgrind at 20,000 " +
			"and at 40,000 queries, the difference over 20,000, the median of three runs at each count).",
		header: comparedHeader(o.compare),
	}
	worst, worstName := 0.0, ""
	for _, b := range shared {
		c, err := compareOne(ctx, bins, ns, b, 3)
		if err != nil {
			return err
		}
		if c.instructions > worst {
			worst, worstName = c.instructions, b
		}
		s.rows = append(s.rows, c.row)
		fmt.Println(strings.Join(c.row, "  "))
	}
	r.add(s)
	r.goal(fmt.Sprintf("ServeDNS, every row (%d) against %s, instructions per query", len(s.rows), o.compare), "≤ 1.01× each",
		fmt.Sprintf("the most %.3f (%s)", worst, worstName))
	return nil
}
