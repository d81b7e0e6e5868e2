package integration

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/history"
)

var (
	historySeed  = flag.Int64("seed", -1, "TestRandomHistory: replay this seed only")
	historySeeds = flag.Int("seeds", 3, "TestRandomHistory: how many seeds to run, from 0")
	historySteps = flag.Int("steps", 30, "TestRandomHistory: steps per seed")
)

// TestRandomHistory plays test/history's random histories, from seeds 0 to -seeds (or -seed
// alone), of -steps steps each, against two bin/coredns replicas with the writer on: after every
// step, their answers and every written object must equal the oracle, within a generous
// deadline. A failure prints the seed and the history up to the step after which the two first
// differed (every earlier step converged); -seed N -steps M replays it. The seeds run side by
// side, each on a control plane of its own (a history restarts kube-apiserver and compacts etcd).
func TestRandomHistory(t *testing.T) {
	t.Parallel()
	seeds := []int64{*historySeed}
	if *historySeed < 0 {
		seeds = nil
		for i := range *historySeeds {
			seeds = append(seeds, int64(i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			cp := harness.Start(t)
			history.CreateNodes(t, cp.Client)
			h := history.New(t, cp, seed, 4, false)
			for i := range *historySteps {
				h.Step(i)
			}
			t.Logf("seed %d: %d steps converged:\n%s", seed, *historySteps, strings.Join(h.Log(), "\n"))
		})
	}
}
