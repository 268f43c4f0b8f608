package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/costmodel"
)

// Tier is where a unit's bytes live: one of the cache's tiers, numbered
// from 1 in the order of Config.Tiers, or Dropped. Tiers are exclusive: a
// unit is on one tier or dropped, never in two places at once.
type Tier uint8

const (
	// Dropped means the unit has no bytes anywhere. Its block stays known
	// (in the prefix tree) so that a later request learns which tokens to
	// recompute. It is the zero Tier.
	Dropped Tier = iota
	// GPU is the first tier, the one attention kernels read.
	GPU
	// CPU is the second tier, where the GPU's victims go first.
	CPU
)

// MaxTiers is the most tiers a Cache has.
const MaxTiers = 8

// String returns "dropped", "gpu", "cpu", or "tierN" for the N-th tier
// below them (N from 3). Cache.TierName gives a tier's configured name.
func (t Tier) String() string {
	switch t {
	case Dropped:
		return "dropped"
	case GPU:
		return "gpu"
	case CPU:
		return "cpu"
	}
	return fmt.Sprintf("tier%d", uint8(t))
}

// tierSet is the cache's tiers, fastest first: each holds one arena per
// layout pool, and the victims of one go down to the next.
type tierSet struct {
	levels []tierLevel // levels[t-1] is tier t
	// forgets says whether a policy keeps history of keys it no longer
	// tracks (see Cache.forgetRecord).
	forgets bool
}

// tierLevel is one tier.
type tierLevel struct {
	name string
	// link is the link between this tier and the one above it (the zero
	// Link for the first tier, and where none was configured).
	link   costmodel.Link
	arenas []*arena // per pool
}

// arena returns the arena of tier t (1 to len(levels)) in pool p.
func (ts *tierSet) arena(t Tier, p int) *arena { return ts.levels[t-1].arenas[p] }

// last returns the lowest tier.
func (ts *tierSet) last() Tier { return Tier(len(ts.levels)) }

// valid reports whether t is one of the tiers.
func (ts *tierSet) valid(t Tier) bool { return t >= GPU && int(t) <= len(ts.levels) }

// loadSeconds returns the time to copy n bytes from tier t up to the first
// tier, over the links of tiers t, t-1, ..., 2 (a zero link costs
// nothing).
func (ts *tierSet) loadSeconds(t Tier, n int64) (float64, error) {
	total := 0.0
	for k := t; k > GPU; k-- {
		l := ts.levels[k-1].link
		if l == (costmodel.Link{}) {
			continue
		}
		s, err := l.Seconds(n)
		if err != nil {
			return 0, err
		}
		total += s
	}
	return total, nil
}

// each calls f for every arena, tier by tier.
func (ts *tierSet) each(f func(a *arena)) {
	for i := range ts.levels {
		for _, a := range ts.levels[i].arenas {
			f(a)
		}
	}
}
