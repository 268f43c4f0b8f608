package tierstore

import (
	"context"

	"github.com/kvtier/kvtier/kvcache"
)

// Lookup asks store which blocks of req's prompt it holds and adopts the
// longest prefix it found into c on tier t (kvcache.Cache.Adopt), so that
// the next Acquire of req loads those blocks from the store instead of
// recomputing them. It returns how many of the prompt's first blocks c
// then holds whole (cached before or adopted now).
//
// The query is cheap whatever the prompt's length: the blocks c holds
// already are not asked about (Cache.HeldBlocks), a block is asked about
// by one of its units (the first slice), and the blocks past them are
// probed, not listed: first at the offsets 0, 1, 3, 7, ... from the first
// block c lacks (and the last block), then, between the last block found
// and the first one missing, at most 16 evenly spaced blocks per round
// until the two are neighbours. Each round is one Contains call (a
// pipeline); a 32k-token prompt of 16-token blocks costs at most 12 keys
// in the first round and 4 more rounds. The prefix it adopts is the blocks
// up to the last one found, which assumes, as a chain's blocks are
// written, that a store holding a block holds those before it: a unit
// that the store lacks after all (a sampled-over block, another unit of a
// probed one, a value evicted since) fails its load and costs the
// recompute of its block, exactly as a unit the store evicts after any
// lookup does. Nothing adopted is trusted: every load checks the value's
// header and checksum (see Decode).
//
// Call it off any scheduling lock: the queries wait on the store. A store
// that fails a query adopts nothing and returns its error (the request is
// then served from the cache's other tiers). Bad extra keys give an error
// wrapping kvcache.ErrInvalidRequest.
func Lookup(ctx context.Context, store Store, c *kvcache.Cache, req kvcache.Request, t kvcache.Tier) (int, error) {
	pk, err := c.PromptKeys(req)
	if err != nil || pk.Blocks() == 0 {
		return 0, err
	}
	held, err := c.HeldBlocks(req)
	if err != nil || held == pk.Blocks() {
		return held, err
	}
	end, err := probe(ctx, store, &pk, held)
	if err != nil || end == held {
		return held, err
	}
	return c.Adopt(req, end, t)
}

// probeWidth is the most blocks a narrowing round of probe asks about.
const probeWidth = 16

// probe returns the end of the prefix of pk's blocks from block from on
// that store is taken to hold (see Lookup): from itself when it lacks
// block from.
func probe(ctx context.Context, store Store, pk *kvcache.PromptKeys, from int) (int, error) {
	n := pk.Blocks()
	var at []int
	for step := 1; from+step-1 < n; step *= 2 {
		at = append(at, from+step-1)
	}
	if at[len(at)-1] != n-1 {
		at = append(at, n-1)
	}
	// Blocks before lo are found (lo-1 is the last one asked about and
	// held), hi is the first one asked about and missing (n: none).
	lo, hi := from, n
	keys := make([]kvcache.UnitKey, 0, max(len(at), probeWidth))
	for len(at) > 0 {
		keys = keys[:0]
		for _, i := range at {
			keys = append(keys, pk.Unit(i, 0))
		}
		have, err := store.Contains(ctx, keys)
		if err != nil {
			return from, err
		}
		for k, i := range at {
			if !have[k] {
				hi = i
				break
			}
			lo = i + 1
		}
		// Narrow between the last block found and the first missing.
		at = at[:0]
		if gap := hi - lo; gap > 0 && hi < n {
			w := min(probeWidth, gap)
			for k := range w {
				at = append(at, lo+(k*gap)/w)
			}
		}
	}
	return lo, nil
}
