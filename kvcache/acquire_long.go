package kvcache

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvtier/kvtier/radix"
)

// longAcquire is a dense Acquire planned in steps (see slices.go): the
// sequence it builds, the prefix it matched, and how far each phase got.
type longAcquire struct {
	req Request
	s   *sequence
	// hitKeys are the block keys whose hits the Acquire reported (see
	// arena.access), while it reports them.
	hitKeys map[UnitID]struct{}
	// prefetch makes it a long Prefetch: the whole cached prefix (capped
	// by MaxLoadTokens) is brought up, nothing is computed, no lookup
	// counted, and the units are left unpinned at the end.
	prefetch bool
	// blockNeed counts, with prefetch, the GPU slots each block needs
	// (a prefix that does not fit is cut at the longest part that does).
	blockNeed []int32
	// skipped lists, with prefetch, the blocks phase 3 skipped (they
	// lost a unit since phase 1): only their claimed units are pinned.
	skipped []int
	// nodes is the matched prefix, every node referenced by s; blocks
	// holds s's blocks as they will be (a matched block replaced by a
	// recompute copy when it lacks a unit), filled in as steps commit.
	nodes   []*radix.Node[int32]
	matched int
	nb      int
	writing int
	// claimed is the next matched block whose GPU units phase 1 pins;
	// prepinned marks, by block×slices+slice, the units it pinned.
	claimed   int
	prepinned []uint64
	// claims and claimHits are a claim step's scratch: the units below the
	// GPU (or of blocks that lost a unit) it counts slots for, and the
	// prepinned indexes of the GPU units it pins.
	claims    []UnitID
	claimHits []int
	// need counts, per pool, the GPU slots phase 3 takes, as phase 1
	// found them; reserve is what is still reserved of it, taken the
	// running step's share (see txn.reserve).
	need, reserve, taken []int
	reserved             bool
	// placed is the next block phase 3 plans; unmark lists the units
	// (block×slices+slice) of matched blocks the running step replaces by
	// recompute copies, whose claims it gives back.
	placed int
	unmark []int
	build  xferBuild
	// lookups counts the units found on each tier (index: pool×
	// (MaxTiers+1) + tier), and hits lists the GPU hits a policy that
	// counts them is told of (Access): both at the end, since a failed
	// Acquire reports no lookup.
	lookups []uint64
	hits    []UnitID
	// told counts the hits told so far, by finish's steps.
	told int
	// What the plan reports, summed over the steps.
	counts     Counts
	executed   []Copy
	fresh      []int
	recomputed int
	loading    int
	// src is the cached block (srcNode in the tree) whose first partial
	// tokens block matched copies (Config.PartialReuse), or -1. From its
	// claim step on, its GPU units are pinned (srcPins) and its units
	// below are claimed (srcClaims, see unitClaimed), so that the steps
	// before block matched's cannot evict it; that step's copy takes
	// them over.
	src       int32
	srcNode   *radix.Node[int32]
	partial   int
	srcPins   []UnitID
	srcClaims []UnitID
	// srcRef says that op holds a reference on src: another sequence's
	// Truncate then copies the block on write instead of taking it out
	// of the tree, and no Release frees its record while op names its
	// units.
	srcRef bool
}

// acquireLong is Acquire of a dense request whose units exceed a step (see
// slices.go). The request is valid.
func (c *Cache) acquireLong(req Request) (Plan, error) {
	op := &longAcquire{req: req}
	if err := c.step("Acquire", op.start(c)); err != nil {
		return Plan{}, err
	}
	err := op.run(c)
	for err == nil && op.told < len(op.hits) {
		err = c.step("Acquire", op.tell(c))
	}
	if err != nil {
		if uerr := op.undo(c); uerr != nil && c.poisoned == nil {
			err = fmt.Errorf("%w; undoing it: %w", err, uerr)
		}
		return Plan{}, err
	}
	var plan Plan
	err = c.step("Acquire", func() error {
		plan = op.finish(c)
		return nil
	})
	return plan, err
}

// run takes op through its phases after the start, one step at a time.
func (op *longAcquire) run(c *Cache) error {
	for op.claimed < op.matched {
		if err := c.step("Acquire", op.claim(c)); err != nil {
			return err
		}
	}
	if op.src >= 0 {
		if err := c.step("Acquire", op.claimSource(c)); err != nil {
			return err
		}
	}
	if err := c.step("Acquire", op.reserveSlots(c)); err != nil {
		return err
	}
	// Room for the plan's copies, off the lock: every slot the rest of
	// the Acquire takes costs at most one copy per tier (a load, and the
	// victims' moves down the tiers), so that the list does not grow by
	// copying what it holds under the lock.
	n := 0
	for _, k := range op.need {
		n += k
	}
	op.executed = make([]Copy, 0, n*c.Tiers())
	for op.placed < op.nb {
		if err := c.step("Acquire", op.place(c)); err != nil {
			return err
		}
	}
	return nil
}

// start matches the prompt and references its cached prefix, in the
// first step.
func (op *longAcquire) start(c *Cache) func() error {
	return func() error {
		if c.poisoned != nil {
			return c.poisoned
		}
		req := &op.req
		keys, nodes, err := c.match(req)
		if err != nil {
			return err
		}
		op.src = -1
		if !op.prefetch {
			var dropped *radix.Node[int32]
			if kept := c.leaveLast(req, nodes); len(kept) < len(nodes) {
				dropped, nodes = nodes[len(kept)], kept
			}
			op.src, op.partial = c.partialSource(req, len(nodes), c.scratch.partial, dropped)
			if op.src >= 0 {
				op.srcNode = c.units.blk(op.src).node
			}
		}
		if op.prefetch {
			k := c.wholePrefix(nodes)
			if req.MaxLoadTokens > 0 {
				k = min(k, max(1, req.MaxLoadTokens/c.geom.blockTokens))
			}
			nodes = nodes[:k]
			req.Tokens = req.Tokens[:k*c.geom.blockTokens]
			op.blockNeed = make([]int32, k)
		}
		s := &sequence{keys: keys, extra: slices.Clone(req.Extra), maxLoadTokens: req.MaxLoadTokens}
		if req.Priorities != nil {
			p := *req.Priorities
			p.Ranges = slices.Clone(p.Ranges)
			s.prio = &p
		}
		s.promptBlocks = c.geom.numBlocks(len(req.Tokens))
		if req.MaxTokens > len(req.Tokens) {
			s.tables.reserve(c.geom.slices, c.geom.numBlocks(req.MaxTokens))
		}
		s.tokens = newTokenList(c.geom.blockTokens)
		s.tokens.append(req.Tokens...)
		op.s = s
		op.nodes = slices.Clone(nodes)
		op.matched, op.nb = len(nodes), s.promptBlocks
		op.writing = c.beingWritten(c.matchState(keys, nodes), req.Tokens, s.extra, op.matched)
		op.prepinned = make([]uint64, (op.matched*c.geom.slices+63)/64)
		np := len(c.geom.pools)
		op.need, op.reserve, op.taken = make([]int, np), make([]int, np), make([]int, np)
		op.lookups = make([]uint64, np*(MaxTiers+1))
		op.build.reset(c.geom.kvLayers, c.geom.blockTokens, s)
		c.begin(nil)
		for _, n := range nodes {
			// Referenced before anything else so that no collection can
			// forget a matched block; a recomputed block keeps the
			// reference as its copy's twin.
			c.ref(n.Value, false)
			s.blocks = append(s.blocks, n.Value)
		}
		s.firstPrivate = op.matched
		c.long++
		return nil
	}
}

// claim is a phase 1 step: it pins the GPU units of the next whole
// matched blocks (hits) and counts what the others need.
func (op *longAcquire) claim(c *Cache) func() error {
	return func() error {
		if c.poisoned != nil {
			return c.poisoned
		}
		g := c.geom
		c.begin(nil)
		c.tx.owner = op.s
		op.stepFrame(c)
		bud := c.newBudget()
		// The pins of GPU hits go through the transaction; the claims of
		// units below, the prepinned bits and the counts of slots needed
		// are op's own state, which a failed step's rollback does not
		// touch: they are noted here and applied once the step has
		// executed, so that a step that fails leaves op as it was.
		claims, hits := op.claims[:0], op.claimHits[:0]
		end := op.claimed
		for first := op.claimed; end < op.matched && (end == first || !bud.spent()); end++ {
			i := end
			b := op.nodes[i].Value
			whole := c.whole(b)
			base := c.units.base(b)
			for sl := range g.slices {
				u := base | UnitID(sl)
				st := c.units.of(u)
				if !whole || st.tier != GPU {
					claims = append(claims, u)
					continue
				}
				c.tx.addNeed(&c.units, u)
				hits = append(hits, i*g.slices+sl)
			}
			bud.units += g.slices
		}
		op.claims, op.claimHits = claims, hits
		if err := c.execute(); err != nil {
			return err
		}
		for _, u := range claims {
			b := c.units.block(u)
			p := g.slicePool[c.units.slice(u)]
			op.need[p]++ // a slot: loaded, or computed
			i := int(c.units.rec(u).index)
			if op.prefetch {
				op.blockNeed[i]++
			}
			st := c.units.of(u)
			if c.whole(b) && st.flags&unitClaimed == 0 {
				// Kept where it is until its block's step.
				st.flags |= unitClaimed
				if st.busy == 0 {
					c.tiers.arena(st.tier, int(p)).pin(u)
				}
			}
		}
		for _, k := range hits {
			op.prepinned[k/64] |= 1 << (k % 64)
		}
		op.claimed = end
		op.record(c)
		return nil
	}
}

// claimSource is the phase 1 step that holds a partial copy's source until
// its block's step: it pins the source's GPU units and claims those below.
// A source that lost a unit, or left the tree, since the match is not
// copied.
func (op *longAcquire) claimSource(c *Cache) func() error {
	return func() error {
		if c.poisoned != nil {
			return c.poisoned
		}
		if !op.sourceValid(c) {
			op.src, op.partial = -1, 0
			return nil
		}
		g := c.geom
		c.begin(nil)
		c.tx.owner = op.s
		op.stepFrame(c)
		c.ref(op.src, false)
		claims := op.srcClaims[:0]
		pins := op.srcPins[:0]
		for sl := range g.slices {
			u := c.units.id(op.src, sl)
			if c.units.of(u).tier == GPU {
				c.tx.addNeed(&c.units, u)
				pins = append(pins, u)
			} else {
				claims = append(claims, u)
			}
		}
		if err := c.execute(); err != nil {
			return err
		}
		op.srcRef = true
		op.srcPins, op.srcClaims = pins, claims[:0]
		for _, u := range claims {
			if st := c.units.of(u); st.flags&unitClaimed == 0 {
				st.flags |= unitClaimed
				if st.busy == 0 {
					c.tiers.arena(st.tier, c.poolOf(u)).pin(u)
				}
				op.srcClaims = append(op.srcClaims, u)
			}
		}
		return nil
	}
}

// sourceValid reports whether op's partial copy's source is still the
// block the match found, in the tree, with every unit's bytes: another
// sequence's Truncate may have taken it out of the tree to write it.
func (op *longAcquire) sourceValid(c *Cache) bool {
	return c.units.blk(op.src).node == op.srcNode && op.srcNode != nil && c.whole(op.src) && !c.restoredUnwritten(op.src)
}

// dropSource ends the hold claimSource took on the source: the pins
// through the running transaction (unpins: nil, directly), the claims at
// once.
func (op *longAcquire) dropSource(c *Cache, unpins *[]UnitID) {
	for _, u := range op.srcPins {
		if unpins != nil {
			*unpins = append(*unpins, u)
		} else {
			c.unpinUnit(u)
		}
	}
	op.srcPins = op.srcPins[:0]
	for _, u := range op.srcClaims {
		if st := c.units.of(u); st.flags&unitClaimed != 0 {
			st.flags &^= unitClaimed
			if st.busy == 0 {
				c.tiers.arena(st.tier, c.poolOf(u)).unpin(u)
			}
		}
	}
	op.srcClaims = op.srcClaims[:0]
	if op.srcRef {
		op.srcRef = false
		c.unref(op.src, false)
	}
}

// reserveSlots is phase 2: the slots the rest of the prompt needs are
// checked and reserved (see slices.go).
func (op *longAcquire) reserveSlots(c *Cache) func() error {
	return func() error {
		if c.poisoned != nil {
			return c.poisoned
		}
		g := c.geom
		for p, pg := range g.pools {
			op.need[p] += (op.nb - op.matched) * pg.unitsPerBlock
		}
		if op.prefetch {
			op.fitPrefetch(c)
		}
		if op.src >= 0 && !op.fits(c) {
			// The partial copy's source is held: without room for that,
			// the block is computed whole.
			op.dropSource(c, nil)
			op.src, op.partial = -1, 0
		}
		for p := range g.pools {
			if a := c.tiers.arena(GPU, p).availableTo(c.tenantOf(op.req.Namespace)); op.need[p] > a {
				return fmt.Errorf("%w: GPU pool %d needs %d slots, %d free or evictable", ErrNoSpace, p, op.need[p], a)
			}
		}
		for p := range g.pools {
			op.reserve[p] = op.need[p]
			c.tiers.arena(GPU, p).reserved += op.need[p]
		}
		op.reserved = true
		// Each layer's transfer is sized for its share (its units'
		// chains: a load or fresh unit and the victims' moves).
		op.build.hint = make([]int, g.kvLayers+1)
		for p, pg := range g.pools {
			for _, sl := range pg.slices {
				op.build.hint[g.sliceLayer[sl]+1] += op.need[p] / pg.unitsPerBlock * len(c.tiers.levels)
			}
		}
		return nil
	}
}

// fits reports whether the GPU can supply the slots op needs.
func (op *longAcquire) fits(c *Cache) bool {
	for p := range c.geom.pools {
		if op.need[p] > c.tiers.arena(GPU, p).availableTo(c.tenantOf(op.req.Namespace)) {
			return false
		}
	}
	return true
}

// fitPrefetch cuts a long Prefetch's prefix at the longest part whose
// slots the GPU can supply (the claims on the rest are released at the
// end, with the others).
func (op *longAcquire) fitPrefetch(c *Cache) {
	g := c.geom
	avail := make([]int, len(g.pools))
	for p := range g.pools {
		avail[p] = c.tiers.arena(GPU, p).availableTo(c.tenantOf(op.req.Namespace))
	}
	clear(op.need)
	for i := range op.blockNeed {
		// A block's units are in one pool each; its slots come from
		// the pools in proportion (the whole block fits, or not).
		b := op.nodes[i].Value
		fits := true
		base := c.units.base(b)
		for sl := range g.slices {
			if st := c.units.of(base | UnitID(sl)); st.tier != GPU {
				p := g.slicePool[sl]
				if op.need[p]++; op.need[p] > avail[p] {
					fits = false
				}
			}
		}
		if !fits {
			for sl := range g.slices {
				if st := c.units.of(base | UnitID(sl)); st.tier != GPU {
					op.need[g.slicePool[sl]]--
				}
			}
			op.nb = i
			return
		}
	}
}

// place is a phase 3 step: the next blocks get their slots.
func (op *longAcquire) place(c *Cache) func() error {
	return func() error {
		if c.poisoned != nil {
			return c.poisoned
		}
		g := c.geom
		s := op.s
		c.begin(nil)
		c.tx.owner = s
		op.stepFrame(c)
		bud := c.placeBudget()
		first := op.placed
		fresh := c.scratch.fresh[:0]
		op.unmark = op.unmark[:0]
		end := first
		for ; end < op.nb && (end == first || !bud.spent()); end++ {
			i := end
			start := len(c.tx.needs)
			if i < op.matched {
				b := op.nodes[i].Value
				if op.prefetch && !c.whole(b) {
					// It lost a unit since: a prefetch computes nothing.
					op.skipped = append(op.skipped, i)
					bud.units += g.slices / 16
					continue
				}
				if c.whole(b) {
					base := c.units.base(b)
					for sl := range g.slices {
						if !op.pinnedAt(c, i, sl) {
							c.tx.addNeed(&c.units, base|UnitID(sl))
						}
					}
				} else {
					// It lost a unit since it was matched: recomputed
					// whole into a private copy, its claimed units
					// given back.
					base := c.units.base(b)
					for sl := range g.slices {
						if op.pinnedAt(c, i, sl) {
							c.tx.unpins = append(c.tx.unpins, base|UnitID(sl))
							op.unmark = append(op.unmark, i*g.slices+sl)
						}
					}
					cp := c.recomputeCopy(b, false)
					s.blocks[i] = cp
					for sl := range g.slices {
						c.tx.addNeed(&c.units, c.units.id(cp, sl))
					}
				}
			} else {
				prio, dur := c.priority(s, i)
				b := c.newBlock(i, s.chunks(op.nb), prio, dur, s.keys.Namespace)
				c.ref(b, false)
				s.blocks = append(s.blocks, b)
				src := int32(-1)
				if i == op.matched && op.src >= 0 {
					if op.sourceValid(c) {
						src = op.src
					}
					// The copy's needs pin the source from here.
					c.tx.unpins = append(c.tx.unpins, op.srcPins...)
				}
				for sl := range g.slices {
					if src >= 0 {
						c.tx.addCopyNeed(&c.units, c.units.id(b, sl), c.units.id(src, sl))
					} else {
						c.tx.addNeed(&c.units, c.units.id(b, sl))
					}
				}
			}
			if needs := c.tx.needs[start:]; freshIn(needs) {
				fresh = append(fresh, i)
				recomputeBlock(needs)
			}
			if i == op.matched && op.src >= 0 && (len(fresh) > 0 && fresh[len(fresh)-1] == i || !op.sourceValid(c)) {
				op.partial = 0 // computed whole
			}
			// What costs is a placement; a block the claims covered
			// whole costs a look at each unit.
			bud.units += len(c.tx.needs) - start + g.slices/16
		}
		c.scratch.fresh = fresh
		if err := c.execute(); err != nil {
			// The step's blocks were never s's: the rollback freed the
			// new records and the copies' references.
			s.blocks = s.blocks[:min(len(s.blocks), max(first, op.matched))]
			for i := first; i < min(end, op.matched); i++ {
				s.blocks[i] = op.nodes[i].Value
			}
			return err
		}
		if first <= op.matched && op.matched < end && op.src >= 0 {
			// The copy pinned what it reads; the hold is over.
			op.srcPins = op.srcPins[:0]
			op.dropSource(c, nil)
			op.src = -1
		}
		op.placed = end
		op.unclaim(c, first, min(end, op.matched))
		for _, k := range op.unmark {
			op.prepinned[k/64] &^= 1 << (k % 64)
		}
		c.indexWritingRange(s, max(first, op.matched), end)
		for _, i := range fresh {
			op.fresh = append(op.fresh, i)
			if i < op.matched {
				s.firstPrivate = min(s.firstPrivate, i) // a recompute copy
				op.recomputed += min((i+1)*g.blockTokens, len(op.req.Tokens)) - i*g.blockTokens
			}
		}
		op.record(c)
		return nil
	}
}

// unclaim ends the claims left on the units of matched blocks [from, to)
// (see unitClaimed): their step loaded the others, or recomputes their
// block.
func (op *longAcquire) unclaim(c *Cache, from, to int) {
	for i := from; i < to; i++ {
		base := c.units.base(op.nodes[i].Value)
		for sl := range c.geom.slices {
			u := base | UnitID(sl)
			if st := c.units.of(u); st.flags&unitClaimed != 0 {
				st.flags &^= unitClaimed
				if st.busy == 0 {
					c.tiers.arena(st.tier, c.poolOf(u)).unpin(u)
				}
			}
		}
	}
}

// freshIn reports whether a block whose needs are needs gets a unit to
// compute (it is then recomputed whole, see recomputeBlock).
func freshIn(needs []need) bool {
	for i := range needs {
		if a := needs[i].act; a == actFresh || a == actRewrite {
			return true
		}
	}
	return false
}

// stepFrame sets up the running transaction as a step of op: it may use
// op's reservation, and its chains join op's transfers.
func (op *longAcquire) stepFrame(c *Cache) {
	t := &c.tx
	t.build = &op.build
	if op.reserved {
		clear(op.taken)
		t.reserve, t.taken = op.reserve, op.taken
		if len(t.arenas) != len(c.geom.pools) {
			t.arenas = t.arenas[:0]
			for p := range c.geom.pools {
				t.arenas = append(t.arenas, c.tiers.arena(GPU, p))
			}
		}
	}
}

// record adds the committed step's work to op's plan: counts, copies,
// lookups, loads in flight, and s's block tables.
func (op *longAcquire) record(c *Cache) {
	k := c.countUnits()
	op.counts.Hits += k.Hits
	op.counts.Onboarded += k.Onboarded
	op.counts.Copied += k.Copied
	op.counts.Computed += k.Computed
	op.counts.Offloaded += k.Offloaded
	op.counts.Dropped += k.Dropped
	op.executed = append(op.executed, c.tx.batch...)
	op.loading += c.tx.loading
	if op.prefetch {
		return // no lookup, no table
	}
	tells := false
	for p := range c.geom.pools {
		tells = tells || c.tiers.arena(GPU, p).tellHits
	}
	for i := range c.tx.needs {
		n := &c.tx.needs[i]
		p := c.poolOf(n.u)
		found := lookupTier(n)
		op.lookups[p*(MaxTiers+1)+int(found)]++
		if tells && found == GPU && c.tiers.arena(GPU, p).tellHits {
			op.hits = append(op.hits, n.u)
		}
	}
	c.syncTables(op.s)
}

// tell is a step of the end of a long Acquire: it reports the next slice
// of the Acquire's hits to a policy that counts them (see countLookups).
func (op *longAcquire) tell(c *Cache) func() error {
	return func() error {
		bud := c.newBudget()
		if op.told == 0 && c.blockKeys {
			op.hitKeys = make(map[UnitID]struct{})
		}
		for ; op.told < len(op.hits) && (bud.units == 0 || !bud.spent()); op.told++ {
			u := op.hits[op.told]
			if c.units.current(u, c.geom.slices) && c.units.tierOf(u) == GPU {
				c.tiers.arena(GPU, c.poolOf(u)).access(u, op.hitKeys)
			}
			bud.units++
		}
		return nil
	}
}

// pinnedAt reports whether phase 1 pinned unit sl of matched block i.
func (op *longAcquire) pinnedAt(c *Cache, i, sl int) bool {
	k := i*c.geom.slices + sl
	return op.prepinned[k/64]&(1<<(k%64)) != 0
}

// finish is the last step: the reservation left over is given back, the
// transfers start, and the sequence becomes live with its plan.
func (op *longAcquire) finish(c *Cache) Plan {
	op.release(c)
	c.startBuilt(&op.build)
	s := op.s
	B := c.geom.blockTokens
	n := len(op.req.Tokens)
	s.pinLo = c.wantLo(nil, false, 0)
	c.register(s)
	plan := Plan{Seq: s.id, Tokens: n, BeingWrittenTokens: op.writing, Counts: op.counts, Loading: op.loading}
	s.executed = op.executed
	if len(s.executed) > 0 {
		plan.Executed = s.executed
	}
	compute := s.compute[:0]
	for _, i := range op.fresh {
		if i >= op.matched {
			break // from the first token a partial copy does not give
		}
		compute = addRange(compute, i*B, min((i+1)*B, n))
	}
	compute = addRange(compute, op.matched*B+op.partial, n)
	s.compute = compute
	plan.Compute, plan.RecomputeTokens, plan.PartialTokens = compute, op.recomputed, op.partial
	c.st.partial += int64(op.partial)
	plan.ReusedTokens = n
	for _, r := range compute {
		plan.ReusedTokens -= r.Len()
	}
	c.st.recomputed += int64(op.recomputed)
	for p := range c.geom.pools {
		for t := Dropped; t <= c.tiers.last(); t++ {
			if k := op.lookups[p*(MaxTiers+1)+int(t)]; k > 0 {
				c.countLookup(p, t, k)
			}
		}
	}
	c.long--
	c.statsUnchanged = false
	return plan
}

// release gives back what is left of op's reservation.
func (op *longAcquire) release(c *Cache) {
	if !op.reserved {
		return
	}
	for p, n := range op.reserve {
		c.tiers.arena(GPU, p).reserved -= n
		op.reserve[p] = 0
	}
	op.reserved = false
}

// prefetchLong is Prefetch of a prefix whose units exceed a step: the
// phases of a long Acquire over the whole cached prefix (cut where it does
// not fit), whose pins are then released as a Release would, tail first.
func (c *Cache) prefetchLong(req Request) (Counts, error) {
	op := &longAcquire{req: req, prefetch: true}
	if err := c.step("Prefetch", op.start(c)); err != nil {
		return Counts{}, err
	}
	err := op.run(c)
	if errors.Is(err, ErrNoSpace) {
		err = nil // nothing fits: nothing done (the claims go below)
		op.nb = 0
	}
	if uerr := op.undo(c); err == nil {
		err = uerr
	}
	return op.counts, err
}

// undo ends a long Acquire that failed after its first step, as an
// Abort of its sequence would (see slices.go): the reservation is given
// back, the transfers its steps planned start (their slots are taken),
// and the pins and references it holds are released.
func (op *longAcquire) undo(c *Cache) error {
	e := &ending{s: op.s, pinned: func(i, sl int) bool {
		placed := i < op.placed && !slices.Contains(op.skipped, i)
		return placed || (i < op.matched && op.pinnedAt(c, i, sl))
	}}
	err := c.step("Acquire", func() error {
		op.release(c)
		op.unclaim(c, op.placed, op.matched)
		op.dropSource(c, nil)
		c.startBuilt(&op.build)
		c.long--
		c.beginEnd(e)
		return nil
	})
	if err != nil {
		return err
	}
	return c.runEnd("Acquire", e)
}
