package kvcache

import (
	"fmt"
	"slices"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/radix"
)

// Adopt registers, as held on tier t, the first blocks full blocks of
// req's prompt, bytes that a store below the GPU holds although this
// cache did not put them there: another server wrote them to a store they
// share, or this cache's previous process wrote them to a store that
// survived it (a warm restart). Nothing is copied: the blocks enter the
// prefix tree with their units on t (a BlockStored event with To t; a
// known block's dropped units get a UnitMoved from Dropped to t), and a later Acquire or Prefetch loads them
// through the engine like any unit on t. A unit the store turns out not to
// have, or to hold corrupt, fails its load (ErrUnitMissing,
// ErrUnitCorrupt) and is recomputed: Adopt trusts the caller, who asks
// the store first (a batched lookup, off the cache's lock).
//
// Blocks the cache holds whole already are left as they are; a known
// block whose units were dropped gets them back on t, unless a sequence
// uses it or a transfer holds it, where Adopt stops. It takes free slots
// of t and, when t is the last tier, evicts (drops) units there to make
// room, as a move down into t would, within the namespace's share of t
// (TierConfig.Shares: at its cap, no free slot); it stops at the first block it
// cannot place whole. It returns how many of the blocks the cache holds
// whole afterwards, from the first (every one of them when all fit).
//
// Adopt needs a cache whose Engine is a KeyedEngine that keeps tier t in a
// store (KeyedEngine.Stores; a Mover or engine with the same Stores method
// is asked too, as a test double that plays the store), or one that moves
// no bytes at all (neither Mover nor Engine: a simulation). It returns an error wrapping
// ErrInvalidRequest for another tier or cache, and for bad keys, ErrOutOfRange
// when t is not a tier below the GPU or blocks is negative or more than
// the prompt's full blocks, and ErrPolicy when a policy broke its
// contract (the cache is then unusable, see ErrPolicy, and the units
// placed before the breach stay).
func (c *Cache) Adopt(req Request, blocks int, t Tier) (_ int, err error) {
	if err := c.lock("Adopt"); err != nil {
		return 0, err
	}
	c.applyFinishedLocked()
	if err := c.checkAdopt(req, blocks, t); err != nil {
		c.unlock(&err)
		return 0, err
	}
	if !c.isLong(blocks * c.geom.slices) {
		var pr adoptProgress
		n, err := c.adoptRange(req, 0, blocks, t, &pr)
		c.unlock(&err)
		return n, err
	}
	// A long prefix is adopted in steps (see slices.go), a slice of
	// blocks each; a step that cannot place its blocks whole ends it.
	c.long++
	c.unlock(&err)
	if err != nil {
		return 0, err
	}
	defer func() {
		c.lockWait()
		c.long--
		c.mu.Unlock()
	}()
	per := max(1, c.placeBudget().max/c.geom.slices)
	n := 0
	// pr is what each step found, from which the next goes on.
	var pr adoptProgress
	for lo := 0; lo < blocks; lo += per {
		hi := min(blocks, lo+per)
		if err := c.step("Adopt", func() error {
			if c.poisoned != nil {
				return c.poisoned
			}
			var err error
			n, err = c.adoptRange(req, lo, hi, t, &pr)
			return err
		}); err != nil {
			return 0, err
		}
		if n < hi {
			break
		}
	}
	return n, nil
}

// adoptProgress is what the steps of a long Adopt pass on, so that each
// goes on from what the one before found rather than from the first block
// (looking at every block of the prefix again at every step made a long
// Adopt quadratic in the prompt):
//
//   - known, the nodes of the prompt's cached prefix up to the step's last
//     block (see adoptMatch);
//   - whole, how many of them, from the first, were whole when the step
//     looked, and losses, Cache.losses then. While losses has not moved
//     no block has lost a unit, so those blocks are whole still, and while
//     known's last node is in the tree they are the prompt's first nodes.
type adoptProgress struct {
	known  []*radix.Node[int32]
	whole  int
	losses uint64
}

// knownLive reports whether known, the prefix an earlier step of an Adopt
// found, is in the tree still: its last node is (then so are the others:
// a node's ancestors outlive it).
func (c *Cache) knownLive(known []*radix.Node[int32]) bool {
	return len(known) > 0 && c.tree.Owns(known[len(known)-1])
}

// adoptMatch returns the nodes of the cached prefix of req's first hi
// blocks (Cache.mu held): known, the prefix an earlier step of the same
// Adopt found, extended block by block while it is in the tree
// (knownLive), or else a match from the first block. The nodes are in
// known's buffer, not in the cache's scratch: a long Adopt keeps them
// across its steps.
func (c *Cache) adoptMatch(req *Request, keys radix.Keys, hi int, known []*radix.Node[int32]) ([]*radix.Node[int32], error) {
	if !c.knownLive(known) {
		_, nodes, err := c.match(req)
		if err != nil {
			return nil, err
		}
		return append(known[:0], nodes[:min(len(nodes), hi)]...), nil
	}
	B := c.geom.blockTokens
	nodes := known[:min(len(known), hi)]
	for i := len(nodes); i < hi; i++ {
		n, err := c.tree.Child(nodes[i-1], keys, req.Tokens[i*B:(i+1)*B], req.Extra)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		if n == nil {
			break
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// checkAdopt returns the error of an Adopt with bad arguments, or of a
// poisoned cache (Cache.mu held).
func (c *Cache) checkAdopt(req Request, blocks int, t Tier) error {
	if c.poisoned != nil {
		return c.poisoned
	}
	if t <= GPU || !c.tiers.valid(t) {
		return fmt.Errorf("%w: tier %d: Adopt places units on a tier below the GPU (2 to %d)", ErrOutOfRange, t, c.tiers.last())
	}
	if full := len(req.Tokens) / c.geom.blockTokens; blocks < 0 || blocks > full {
		return fmt.Errorf("%w: %d blocks to adopt, the prompt has %d full blocks", ErrOutOfRange, blocks, full)
	}
	if !c.adoptable(t) {
		return fmt.Errorf("%w: tier %d (%s) is not a store the engine addresses by unit identity (KeyedEngine.Stores): its slots would be served as they are", ErrInvalidRequest, t, c.tiers.levels[t-1].name)
	}
	return nil
}

// adoptRange adopts blocks [lo, hi) of req's prompt on tier t (Cache.mu
// held, in an operation's frame), those before lo being adopted or held
// already, and returns how many of the prompt's first blocks the cache
// holds whole afterwards, up to hi. pr is what the step before found (the
// zero adoptProgress for the first) and becomes what this one found: the
// nodes of the prompt's cached prefix up to hi (known extended, see
// adoptMatch) and how many of them were whole.
func (c *Cache) adoptRange(req Request, lo, hi int, t Tier, pr *adoptProgress) (int, error) {
	keys := radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}
	k := 0
	if c.knownLive(pr.known) && pr.losses == c.losses {
		// No block has lost a unit since the step before looked: the
		// blocks it saw whole are whole still.
		k = pr.whole
	}
	nodes, err := c.adoptMatch(&req, keys, hi, pr.known)
	if err != nil {
		return 0, err
	}
	k = min(k, len(nodes))
	k += c.wholePrefix(nodes[k:])
	if invariantChecks {
		if w := c.wholePrefix(nodes); w != k {
			c.poisoned = fmt.Errorf("%w: Adopt took %d blocks of the prompt for whole from the first, %d are", ErrInvariant, k, w)
			return 0, c.poisoned
		}
	}
	pr.known, pr.whole, pr.losses = nodes, k, c.losses
	if k < lo {
		// A block adopted before is gone (evicted by a step's room on
		// the last tier) or lost a unit.
		return k, nil
	}
	blocks, B := hi, c.geom.blockTokens
	plan := c.planAdoption(nodes, lo, blocks, t, c.tenantOf(req.Namespace))
	if len(plan.units) == 0 {
		return plan.blocks, nil
	}
	c.begin(nil)
	c.tx.executing = true
	c.beginPolicies()
	// The units on t of the blocks counted on stay there: the room this
	// takes on the last tier is not theirs.
	for _, n := range nodes[min(lo, len(nodes)):min(blocks, len(nodes))] {
		for sl := range c.geom.slices {
			u := c.units.id(n.Value, sl)
			if st := c.units.of(u); st.tier == t && !c.tiers.arena(t, c.poolOf(u)).txPinned[st.slot] {
				c.pinResident(u, t, c.poolOf(u))
				c.tx.temps = append(c.tx.temps, tempPin{u: u, tier: t})
			}
		}
	}
	if c.poisoned != nil {
		// A policy broke while told of the pins.
		return 0, c.abort(c.poisoned)
	}
	if len(c.tx.temps) > 0 {
		// The pins took units of t out of its room: planned again.
		// Without pins nothing planAdoption reads has changed since
		// (the plan is still in its buffer), and the blocks past the
		// match, which have no units to pin, are planned once.
		plan = c.planAdoption(nodes, lo, blocks, t, c.tenantOf(req.Namespace))
		if len(plan.units) == 0 {
			c.commit()
			return plan.blocks, nil
		}
	}
	var base UnitID
	for i := range plan.units {
		pu := &plan.units[i]
		if pu.b < 0 {
			if i > 0 && plan.units[i-1].index == pu.index {
				pu.b = plan.units[i-1].b
			} else {
				pu.b = c.newBlock(int(pu.index), blocks, eviction.DefaultPriority, 0, req.Namespace)
			}
		}
		if i == 0 || pu.b != plan.units[i-1].b {
			base = c.units.base(pu.b)
		}
		u := base | UnitID(pu.slice)
		p := int(c.geom.slicePool[pu.slice])
		s, ok, err := c.adoptSlot(t, p, u)
		if err == nil && !ok {
			// planAdoption counted the slots.
			err = c.poison(c.tiers.arena(t, p), "Evict found no victim among %d evictable units", c.tiers.arena(t, p).evictable())
		}
		if err != nil {
			return 0, c.abort(err)
		}
		c.tiers.arena(t, p).setOwner(s, u)
		pu.u, pu.slot = u, s
	}
	// Nothing fails from here on: the new blocks enter the tree.
	var parent *radix.Node[int32]
	matched := len(nodes) // the blocks past them enter the tree
	if matched > 0 {
		parent = nodes[matched-1]
	}
	last := int32(-1)
	for i := range plan.units {
		pu := &plan.units[i]
		if pu.b == last || int(pu.index) < matched {
			continue
		}
		last = pu.b
		at := int(pu.index)
		n, created, err := c.tree.InsertChild(parent, keys, req.Tokens[at*B:(at+1)*B], req.Extra)
		if err != nil || !created {
			// Unreachable: the parent is live, the keys and extra keys
			// were validated by match, and no block past the match
			// exists.
			return 0, c.abort(c.poison(c.tiers.arena(t, c.poolOf(pu.u)), "prefix tree refused adopted block %d: %v", pu.index, err))
		}
		n.Value = pu.b
		c.units.blk(pu.b).node = n
		nodes = append(nodes, n)
		c.st.stored++
		c.emitBlock(BlockStored, pu.b, t)
		parent = n
	}
	pr.known = nodes
	c.commit()
	// The units of a block are placed one after the other: the block's
	// part of their Entry is made once, for all of them (a unit's Entry
	// is its block's but for the layer, see blockEntry). Each is placed
	// as place does.
	var e eviction.Entry
	for i := range plan.units {
		pu := &plan.units[i]
		if i == 0 || pu.b != plan.units[i-1].b {
			e = c.blockEntry(pu.b)
		}
		a := c.tiers.arena(t, int(c.geom.slicePool[pu.slice]))
		c.units.place(pu.u, t, pu.slot)
		var ue eviction.Entry
		if a.wantsEntry(pu.b) {
			ue = c.sliceEntry(e, int(pu.slice))
		}
		c.placeEntry(a, pu.u, ue, false)
		c.gainBytes(pu.b)
		a.adopted++
		if int(pu.index) < matched {
			// A new block's BlockStored said where its units are.
			c.emitMove(pu.u, Dropped, t)
		}
	}
	c.statsUnchanged = false
	return plan.blocks, nil
}

// HeldBlocks returns how many of the first full blocks of req's prompt the
// cache holds whole, every unit with bytes on some tier: what a lookup in
// a shared store need not ask about (tierstore.Lookup skips them). It
// takes the cache's lock for the prefix match, about a microsecond per
// block. It returns an error wrapping ErrInvalidRequest for bad extra
// keys, ErrReentrant from a callback.
func (c *Cache) HeldBlocks(req Request) (int, error) {
	if err := c.lock("HeldBlocks"); err != nil {
		return 0, err
	}
	defer c.mu.Unlock()
	_, nodes, err := c.match(&req)
	if err != nil {
		return 0, err
	}
	return c.wholePrefix(nodes), nil
}

// adoption is what Adopt will place: units, in block order (those of
// blocks past the match enter the tree), and how many blocks from the
// first will be whole once they are placed.
type adoption struct {
	units  []adoptedUnit
	blocks int
}

// adoptedUnit is one unit Adopt places: slice of block b (-1 until Adopt
// allocates a record for a block past the match), the prompt's index-th,
// in slot of the tier. (Its fields are narrow: a long Adopt lists every
// unit of the prompt.)
type adoptedUnit struct {
	u     UnitID
	b     int32
	index int32
	slice int32
	slot  int32
}

// planAdoption lists the units Adopt places on tier t for blocks [lo,
// blocks) of a prompt that matches nodes, those before lo being held whole
// already: the dropped units of known blocks that nothing uses, then every
// unit of the blocks past the match, as long as the tier can take them
// whole. The units are in a scratch buffer, valid until the next call.
func (c *Cache) planAdoption(nodes []*radix.Node[int32], lo, blocks int, t Tier, tenant uint8) adoption {
	g := c.geom
	room := c.scratch.room[:0]
	for range g.pools {
		room = append(room, 0)
	}
	c.scratch.room = room
	for p := range g.pools {
		a := c.tiers.arena(t, p)
		room[p] = len(a.free)
		if t == c.tiers.last() {
			room[p] = a.available()
		}
		if at := a.tenants; at != nil {
			room[p] = at.roomFor(int(at.of[tenant]), len(a.free), t == c.tiers.last())
		}
	}
	plan := adoption{blocks: lo, units: c.scratch.adopted[:0]}
	for i := lo; i < blocks; i++ {
		start := len(plan.units)
		if i < len(nodes) {
			b := nodes[i].Value
			if c.whole(b) {
				plan.blocks++
				continue
			}
			r := c.units.blk(b)
			if r.refs > 0 || r.pending > 0 {
				break
			}
			for sl := range g.slices {
				u := c.units.id(b, sl)
				if st := c.units.of(u); st.tier == Dropped && st.flags == 0 && st.busy == 0 {
					plan.units = append(plan.units, adoptedUnit{b: b, index: int32(i), slice: int32(sl)})
				}
			}
		} else {
			// A block past the match: all its units, so each pool's
			// room goes down by the pool's units per block (what the
			// loop below counts unit by unit), and the block fits or
			// not whatever their order.
			fits := true
			for p := range g.pools {
				if room[p] -= len(g.pools[p].slices); room[p] < 0 {
					fits = false
				}
			}
			if !fits {
				break
			}
			plan.units = slices.Grow(plan.units, g.slices)
			for sl := range g.slices {
				plan.units = append(plan.units, adoptedUnit{b: -1, index: int32(i), slice: int32(sl)})
			}
			plan.blocks++
			continue
		}
		fits := true
		for _, pu := range plan.units[start:] {
			p := g.slicePool[pu.slice]
			if room[p]--; room[p] < 0 {
				fits = false
			}
		}
		if !fits || (i < len(nodes) && len(plan.units)-start+int(c.units.blk(nodes[i].Value).held) != g.slices) {
			plan.units = plan.units[:start]
			break
		}
		plan.blocks++
	}
	c.scratch.adopted = plan.units[:0]
	return plan
}

// adoptable reports whether Adopt may register units on tier t: a tier
// the engine keeps in a store that checks what it serves (or that the
// Mover or engine says it does, see storeTiers), or any tier of a cache
// that moves no bytes (a simulation).
func (c *Cache) adoptable(t Tier) bool {
	var mover any = c.mover
	if c.engine != nil {
		mover = c.engine
	}
	if s, ok := mover.(storeTiers); ok {
		return s.Stores(t)
	}
	return mover == nil
}

// storeTiers is what a KeyedEngine (or a test's Mover playing a store)
// says of the tiers it keeps in stores.
type storeTiers interface{ Stores(t Tier) bool }

// adoptSlot returns a slot of tier t in pool p for Adopt's unit u: a free
// one, or, on the last tier, one a victim leaves (dropped).
func (c *Cache) adoptSlot(t Tier, p int, u UnitID) (int32, bool, error) {
	if t == c.tiers.last() {
		return c.takeSlot(t, p, u)
	}
	a := c.tiers.arena(t, p)
	if a.atCap(u) {
		return 0, false, nil
	}
	s, ok := a.pop()
	if ok {
		c.tx.log(undoRec{kind: undoSlot, tier: t, pool: int32(p), slot: s, u: noUnit})
	}
	return s, ok, nil
}
