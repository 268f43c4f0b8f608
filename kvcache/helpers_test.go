package kvcache

import (
	"slices"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/layout"
)

// tiersOf returns a GPU of capacity gpu with policy gp and, unless cpu is
// zero, a CPU tier of capacity cpu with policy cp (nil policies: LRU).
func tiersOf(gpu, cpu Capacity, gp, cp PolicyFactory) []TierConfig {
	t := GPUAndCPU(gpu, cpu)
	t[0].Policy = gp
	if len(t) > 1 {
		t[1].Policy = cp
	}
	return t
}

// byQueryHeads returns the Selection of layer that reads, for each query
// head q, the blocks heads[q] (the union over each KV head's group), as a
// server whose kernel selects per query head builds it. heads must have one
// list per query head of l's model.
func byQueryHeads(l *layout.Layout, layer int, heads [][]int64) Selection {
	m := l.Model()
	sel := Selection{Layer: layer, Blocks: make([][]int, m.StoredHeads())}
	for q, blocks := range heads {
		h, err := m.KVHeadOf(q)
		if err != nil {
			panic(err) // the tests pass one list per query head
		}
		for _, b := range blocks {
			sel.Blocks[h] = append(sel.Blocks[h], int(b))
		}
	}
	for h := range sel.Blocks {
		slices.Sort(sel.Blocks[h])
		sel.Blocks[h] = slices.Compact(sel.Blocks[h])
	}
	return sel
}

// what names event e: its kind, or for UnitMoved what the move is:
// "offloaded" (down a tier), "onboarded" (up to the GPU), "dropped" (to
// Dropped) or "restored" (from Dropped).
func what(e Event) string {
	if e.Kind != UnitMoved {
		return e.Kind.String()
	}
	switch {
	case e.To == Dropped:
		return "dropped"
	case e.From == Dropped:
		return "restored"
	case e.To > e.From:
		return "offloaded"
	}
	return "onboarded"
}

// whats names the events of es (see what), but for BlockMoved, which
// follows from the unit events (the model-based tests check it).
func whats(es []Event) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		if e.Kind != BlockMoved {
			out = append(out, what(e))
		}
	}
	return out
}

// linked sets the Link of every tier of tiers below the first to l.
func linked(tiers []TierConfig, l costmodel.Link) []TierConfig {
	for i := 1; i < len(tiers); i++ {
		tiers[i].Link = l
	}
	return tiers
}
