package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/radix"
)

// Admission is the answer of Admit: what a request would still need from
// the GPU after reuse.
type Admission struct {
	// ReusedTokens is how many prompt tokens the cache holds (on the GPU or
	// the CPU) in blocks that need no recompute.
	ReusedTokens int
	// NeedSlots is the number of GPU slots the request would take: units
	// to onboard from the CPU plus fresh units to compute. For a sparse
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
	keys := radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}
	nodes, err := c.tree.Match(c.scratch.nodes[:0], keys, req.Tokens, req.Extra)
	c.scratch.nodes = nodes[:0]
	if err != nil {
		return Admission{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	B := c.blockTokens
	need := make([]int, len(c.pools))
	pinning := make([]int, len(c.pools))
	var a Admission
	if req.Sparse {
		k := 0
		for _, n := range nodes {
			if c.blocks[n.Value].held != int32(c.numSlices) {
				break
			}
			k++
		}
		a.BeingWrittenTokens = c.beingWritten(c.matchState(keys, nodes[:k]), req.Tokens, req.Extra, k)
		a.ReusedTokens = k * B
		if len(req.Tokens) > k*B {
			for p := range c.pools {
				need[p] = c.pools[p].unitsPerBlock
			}
		}
	} else {
		// A dense Acquire pins every unit of every prompt block; a block
		// with a dropped unit is recomputed into a private copy whose
		// units all need slots.
		nb := c.numBlocks(len(req.Tokens))
		compute := 0
		for i, n := range nodes {
			if c.lacksBytes(n.Value, nil) {
				for p := range c.pools {
					need[p] += c.pools[p].unitsPerBlock
				}
				compute += min((i+1)*B, len(req.Tokens)) - i*B
				continue
			}
			for sl := range c.numSlices {
				u := c.unit(n.Value, sl)
				p := c.slicePool[sl]
				switch c.uTier[c.ix(u)] {
				case GPU:
					if c.uPins[c.ix(u)] == 0 {
						pinning[p]++
					}
				case CPU:
					need[p]++
				}
			}
		}
		for p := range c.pools {
			need[p] += (nb - len(nodes)) * c.pools[p].unitsPerBlock
		}
		a.ReusedTokens = len(nodes)*B - compute
		a.BeingWrittenTokens = c.beingWritten(c.matchState(keys, nodes), req.Tokens, req.Extra, len(nodes))
	}
	a.Fits = true
	for p := range c.pools {
		free := c.gpu[p].available() - pinning[p]
		a.NeedSlots += need[p]
		if need[p] > 0 {
			a.FreeSlots += free
		}
		if need[p] > free {
			a.Fits = false
		}
	}
	return a, nil
}

// Clear forgets every cached block (an AllCleared event), like vLLM's prefix
// cache reset. It needs an idle cache: it returns an error wrapping ErrBusy
// while sequences are live.
func (c *Cache) Clear() (err error) {
	if err := c.lock("Clear"); err != nil {
		return err
	}
	defer c.unlock(&err)
	if c.poisoned != nil {
		return c.poisoned
	}
	if len(c.seqs) > 0 {
		return fmt.Errorf("%w: %d sequences", ErrBusy, len(c.seqs))
	}
	for b := range c.blocks {
		if !c.blocks[b].live {
			continue
		}
		for sl := range c.numSlices {
			c.freeUnit(c.unit(int32(b), sl))
		}
	}
	c.st.removed += uint64(c.tree.Clear(func(n *radix.Node[int32]) {
		c.unmarkHollow(n.Value)
		c.freeBlock(n.Value)
	}))
	if c.events.enabled() {
		c.events.emit(Event{Kind: AllCleared})
	}
	return nil
}
