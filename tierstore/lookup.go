package tierstore

import (
	"context"

	"github.com/kvtier/kvtier/kvcache"
)

// Lookup asks store which units of req's prompt it holds, in one batched
// call, and adopts the longest prefix of blocks it holds whole into c on
// tier t (kvcache.Cache.Adopt), so that the next Acquire of req loads them
// from the store instead of recomputing them. It returns how many of the
// prompt's first blocks c then holds whole (cached before or adopted now).
// Call it off any scheduling lock: the membership query waits on the
// store. A store that fails the query adopts nothing and returns its error
// (the request is then served from the cache's other tiers).
func Lookup(ctx context.Context, store Store, c *kvcache.Cache, req kvcache.Request, t kvcache.Tier) (int, error) {
	keys, err := c.UnitKeys(nil, req)
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	have, err := store.Contains(ctx, keys)
	if err != nil {
		return 0, err
	}
	slices := c.Layout().UnitsPerBlock()
	blocks := 0
	for blocks*slices < len(keys) && allTrue(have[blocks*slices:(blocks+1)*slices]) {
		blocks++
	}
	if blocks == 0 {
		return 0, nil
	}
	return c.Adopt(req, blocks, t)
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}
