package kvcache

// pinSpan is what a sequence pins through its blocks: in pool p, the units
// of blocks[lo[p]:]. A dense sequence's lo is the first block inside the
// pool's window as seen from the first token it writes next, or after a
// Truncate from the last token it keeps (0 without a window); a sparse
// sequence's is the block of that token, so it pins only the blocks its
// last Append wrote. A nil lo is all zeros (a sequence that
// pins nothing yet has no blocks).
type pinSpan struct {
	blocks []int32
	lo     []int32
}

func (sp pinSpan) from(p int) int {
	if sp.lo == nil {
		return 0
	}
	return int(sp.lo[p])
}

// pins reports whether sp pins block i in pool p.
func (sp pinSpan) pins(i, p int) bool { return i < len(sp.blocks) && i >= sp.from(p) }

// span returns what s pins now.
func (s *sequence) span() pinSpan { return pinSpan{blocks: s.blocks, lo: s.pinLo} }

// wantLo fills lo with the first block a sequence pins in each pool when
// the next token it writes is writeFrom.
func (c *Cache) wantLo(lo []int32, sparse bool, writeFrom int) []int32 {
	lo = lo[:0]
	B := c.geom.blockTokens
	for p := range c.geom.pools {
		var b int
		if sparse {
			b = writeFrom / B
		} else if w := c.geom.pools[p].window; w > 0 && writeFrom+1 > w {
			b = (writeFrom + 1 - w) / B
		}
		lo = append(lo, int32(b))
	}
	return lo
}

// queuePins queues into the transaction what takes a sequence from pinning
// old to pinning new, whose blocks agree below index same. Unpins are
// queued last block first, so that recency policies (whose Unpin counts as
// the latest use) evict a chain's tail first. The new block cow, if any
// (else -1), is filled by copying block src. The indices of the blocks that
// get fresh (to compute) units are left in c.scratch.fresh, ascending; the
// other units those blocks newly pin are not copied (see recomputeBlock).
//
// Only the blocks whose pins can change are visited: those between the old
// and the new start of a pool's pins (a window that moved) and those from
// same on. So a decode step costs the same at any context length.
func (c *Cache) queuePins(old, new pinSpan, same int, cow, src int32) {
	t := &c.tx
	nOld, nNew := len(old.blocks), len(new.blocks)
	hi := max(nOld, nNew)
	same = min(same, nOld, nNew)
	// The window region: the hull of the pools whose start moved.
	wlo, whi := hi, 0
	for p := range c.geom.pools {
		if a, b := old.from(p), new.from(p); a != b && nOld > 0 {
			wlo, whi = min(wlo, a, b), max(whi, a, b)
		}
	}
	whi = min(whi, hi)
	// At most two intervals, [wlo, whi) and [same, hi), in order, merged
	// when they overlap or touch; visited last block first for the
	// unpins, first block first for the needs.
	var ivs [2][2]int
	n := 0
	for _, iv := range [2][2]int{{wlo, whi}, {same, hi}} {
		if iv[0] < iv[1] {
			ivs[n] = iv
			n++
		}
	}
	if n == 2 {
		if ivs[1][0] < ivs[0][0] {
			ivs[0], ivs[1] = ivs[1], ivs[0]
		}
		if ivs[1][0] <= ivs[0][1] {
			ivs[0][1] = max(ivs[0][1], ivs[1][1])
			n = 1
		}
	}
	changed := func(i, p int) (unpin, pin bool) {
		inOld, inNew := old.pins(i, p), new.pins(i, p)
		if inOld && inNew && old.blocks[i] == new.blocks[i] {
			return false, false
		}
		return inOld, inNew
	}
	for k := n - 1; k >= 0; k-- {
		for i := ivs[k][1] - 1; i >= ivs[k][0]; i-- {
			for p := range c.geom.pools {
				if unpin, _ := changed(i, p); !unpin {
					continue
				}
				base := c.units.base(old.blocks[i])
				for _, sl := range c.geom.pools[p].slices {
					t.unpins = append(t.unpins, base|UnitID(sl))
				}
			}
		}
	}
	c.scratch.fresh = c.scratch.fresh[:0]
	for k := range n {
		for i := ivs[k][0]; i < ivs[k][1]; i++ {
			fresh := false
			first := len(t.needs)
			for p := range c.geom.pools {
				if _, pin := changed(i, p); !pin {
					continue
				}
				b := new.blocks[i]
				base := c.units.base(b)
				for _, sl := range c.geom.pools[p].slices {
					var a action
					if b == cow {
						a = c.tx.addCopyNeed(&c.units, base|UnitID(sl), c.units.id(src, sl))
					} else {
						a = c.tx.addNeed(&c.units, base|UnitID(sl))
					}
					fresh = fresh || a == actFresh || a == actRewrite
				}
			}
			if fresh {
				c.scratch.fresh = append(c.scratch.fresh, i)
				recomputeBlock(t.needs[first:])
			}
		}
	}
}

// recomputeBlock adjusts the needs of one block that will be recomputed
// (one of its needed units has no bytes). The server then recomputes the
// block's tokens through every layer and writes all of its units, so bytes
// copied into them would be overwritten: units on a lower tier are not
// onboarded but get fresh slots (their copies are released), and
// copy-on-write copies are not made. Units already on the GPU stay pinned
// where they are (hits): the recompute rewrites the same bytes into them,
// which costs no slot and no copy, and other sequences may be reading them
// meanwhile.
func recomputeBlock(needs []need) {
	for i := range needs {
		switch needs[i].act {
		case actOnboard:
			needs[i].act = actRecompute
		case actCopy:
			needs[i].act, needs[i].from = actFresh, Dropped
		}
	}
}
