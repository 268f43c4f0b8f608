package kvcache

// CachedBlock is a block of the prefix tree as Cache.Blocks reports it.
type CachedBlock struct {
	// Hash is the block's chain hash; ParentHash the previous block's
	// when HasParent.
	Hash       uint64
	ParentHash uint64
	HasParent  bool
	// Namespace and LoRA are the block's keys.
	Namespace string
	LoRA      string
	// Medium is where the block is as a whole (see Medium), from the
	// tiers its units are on now; a unit whose load failed and that is
	// not yet recomputed counts as Dropped, as its events report it.
	Medium Tier
}

// Blocks appends every block of the prefix tree to dst, in no particular
// order, and returns it. Blocks walks the whole tree under the cache's
// lock, so it is meant for tests, monitors and audits (does a router's
// view, rebuilt from the events, match the cache?), not for every
// scheduling step. The Medium it reports for a block equals the last one
// the block's BlockStored and BlockMoved events gave. Called from a
// policy, Mover or Decider callback, it returns an error wrapping
// ErrReentrant.
func (c *Cache) Blocks(dst []CachedBlock) ([]CachedBlock, error) {
	if err := c.lock("Blocks"); err != nil {
		return dst, err
	}
	defer c.mu.Unlock()
	for n := range c.tree.All() {
		ph, hp := n.ParentHash()
		keys := n.Keys()
		m := GPU
		states := c.units.statesOf(n.Value)
		for sl := range c.geom.slices {
			st := &states[sl]
			if !st.hasBytes() {
				m = Dropped
				break
			}
			m = max(m, st.tier)
		}
		dst = append(dst, CachedBlock{Hash: n.Hash(), ParentHash: ph, HasParent: hp,
			Namespace: keys.Namespace, LoRA: keys.LoRA, Medium: m})
	}
	return dst, nil
}
