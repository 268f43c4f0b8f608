package kvcache

import "github.com/kvtier/kvtier/radix"

// Admission is the answer of Admit: what a request would still need from
// the GPU after reuse.
type Admission struct {
	// ReusedTokens is how many prompt tokens the cache holds (on any tier)
	// in blocks that need no recompute, and, with Config.PartialReuse, the
	// tokens Acquire would copy from a block that agrees with part of one
	// (Plan.PartialTokens).
	ReusedTokens int
	// NeedSlots is the number of GPU slots the request would take: units
	// to onboard from lower tiers plus fresh units to compute (or to fill
	// by a partial copy). For a sparse
	// request it is the slots of one block (its first Append) when
	// tokens remain to prefill, else 0.
	NeedSlots int
	// FreeSlots is what the GPU can supply now in the pools the request
	// needs: free slots plus evictable units, not counting the units the
	// request itself would pin.
	FreeSlots int
	// Fits reports whether every pool can supply its share now, so that
	// Acquire would not fail with ErrNoSpace (barring a concurrent call).
	Fits bool
	// BeingWrittenTokens is what Plan.BeingWrittenTokens would be: prompt
	// tokens past the cached prefix that other live sequences are
	// writing now. A scheduler may prefer to wait for their commit (their
	// next step) and reuse them rather than compute them again.
	BeingWrittenTokens int
}

// Admit answers, without changing anything, how many GPU slots req would
// still need after reusing the cache, and whether they can be had now
// (admission control for a scheduler). It returns an error wrapping
// ErrInvalidRequest for the inputs Acquire rejects, and ErrPolicy in a
// poisoned cache.
func (c *Cache) Admit(req Request) (Admission, error) {
	if err := req.Priorities.validate(); err != nil {
		return Admission{}, err
	}
	if err := c.lock("Admit"); err != nil {
		return Admission{}, err
	}
	defer c.mu.Unlock()
	if c.poisoned != nil {
		return Admission{}, c.poisoned
	}
	keys, nodes, src, partial, err := c.matchPrompt(&req)
	if err != nil {
		return Admission{}, err
	}
	need := make([]int, len(c.geom.pools))
	pinning := make([]int, len(c.geom.pools))
	admit := func(src int32, partial int) Admission {
		clear(need)
		clear(pinning)
		var a Admission
		if req.Sparse {
			a = c.admitSparse(keys, nodes, req, need)
		} else {
			a = c.admitDense(keys, nodes, src, req, need, pinning)
			a.ReusedTokens += partial
		}
		a.Fits = true
		for p := range c.geom.pools {
			free := c.tiers.arena(GPU, p).availableTo(c.tenantOf(req.Namespace)) - pinning[p]
			a.NeedSlots += need[p]
			if need[p] > 0 {
				a.FreeSlots += free
			}
			if need[p] > free {
				a.Fits = false
			}
		}
		return a
	}
	a := admit(src, partial)
	if !a.Fits && src >= 0 {
		// The partial copy's source is pinned while it runs: an Acquire
		// that finds no room then computes the block whole.
		a = admit(-1, 0)
	}
	return a, nil
}

// admitSparse estimates a sparse Acquire of req, whose prompt matches
// nodes: it takes the prefix of blocks whose units all hold bytes, pinning
// nothing, and needs one block's slots for its first Append when tokens
// remain to prefill (added to need, per pool).
func (c *Cache) admitSparse(keys radix.Keys, nodes []*radix.Node[int32], req Request, need []int) Admission {
	g := c.geom
	k := c.wholePrefix(nodes)
	var a Admission
	a.BeingWrittenTokens = c.beingWritten(c.matchState(keys, nodes[:k]), req.Tokens, req.Extra, k)
	a.ReusedTokens = k * g.blockTokens
	if len(req.Tokens) > k*g.blockTokens {
		for p := range g.pools {
			need[p] = g.pools[p].unitsPerBlock
		}
	}
	return a
}

// admitDense estimates a dense Acquire of req, whose prompt matches nodes:
// it pins every unit of every prompt block, so it needs a slot for every
// unit not on the GPU (onboarded or fresh; a block with a dropped unit is
// recomputed into a private copy whose units all need slots), and it makes
// the unpinned GPU units it hits, and those of src, a partial copy's
// source when not -1, unevictable (added to need and pinning, per pool).
func (c *Cache) admitDense(keys radix.Keys, nodes []*radix.Node[int32], src int32, req Request, need, pinning []int) Admission {
	g := c.geom
	B := g.blockTokens
	nb := g.numBlocks(len(req.Tokens))
	compute := 0
	counted := make([]bool, len(g.pools)) // per block: its pin counted
	for i, n := range nodes {
		if !c.whole(n.Value) {
			for p := range g.pools {
				need[p] += g.pools[p].unitsPerBlock
			}
			compute += min((i+1)*B, len(req.Tokens)) - i*B
			continue
		}
		c.admitPins(n.Value, pinning, counted)
		states := c.units.statesOf(n.Value)
		for sl := range g.slices {
			if states[sl].tier != GPU {
				need[g.slicePool[sl]]++ // on a lower tier: onboarded
			}
		}
	}
	if src >= 0 {
		// A partial copy pins its source's GPU units while it runs.
		c.admitPins(src, pinning, counted)
	}
	for p := range g.pools {
		need[p] += (nb - len(nodes)) * g.pools[p].unitsPerBlock
	}
	return Admission{ReusedTokens: len(nodes)*B - compute,
		BeingWrittenTokens: c.beingWritten(c.matchState(keys, nodes), req.Tokens, req.Extra, len(nodes))}
}

// admitPins adds to pinning, per pool, the GPU units of block b that are
// evictable now and that pinning b takes out of eviction; counted is
// scratch of one bool per pool.
func (c *Cache) admitPins(b int32, pinning []int, counted []bool) {
	g := c.geom
	clear(counted)
	states := c.units.statesOf(b)
	for sl := range g.slices {
		st := &states[sl]
		if st.tier != GPU {
			continue
		}
		p := g.slicePool[sl]
		switch a := c.tiers.arena(GPU, int(p)); {
		case a.grouped():
			// Under block keys the block's first pin takes all its units
			// out of eviction: counted once, if the block is evictable
			// now.
			if !counted[p] {
				counted[p] = true
				if gc := a.group(b); gc.pinned == 0 {
					pinning[p] += int(gc.tracked)
				}
			}
		case st.pins == 0 && !gpuHeld(st):
			// Evictable now (not held by a transfer either).
			pinning[p]++
		}
	}
}
