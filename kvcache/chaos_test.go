package kvcache

import (
	"errors"
	"fmt"

	"github.com/kvtier/kvtier/eviction"
)

// chaosWorld is shared by the chaos policies of one cache: the keys every
// one of them was ever given, so that a lie can name a unit of another
// tier or pool, or of a block forgotten since.
type chaosWorld struct {
	choose func(n int) int
	// oneIn is the odds of a misbehaviour per call: 1 in oneIn.
	oneIn int
	seen  []UnitID
	// breaches counts what the policies did, by kind.
	breaches map[string]int
	// trace, when set, is told of every breach (debugging).
	trace func(string)
	// cpuPinnedLiar makes every Evict of the policy of a tier below the
	// GPU that has a pinned key return it (the cache pins keys there only
	// for the running operation: onboard, recompute and copy sources), on
	// top of the random breaches.
	cpuPinnedLiar bool
}

// errChaos is what a chaos policy's refused Insert returns.
var errChaos = errors.New("chaos policy: insert refused")

// chaosPolicy wraps a policy and, in one call in world.oneIn, breaks the
// Policy contract the way a buggy user policy would: it refuses or
// swallows an Insert, swallows a Pin, Unpin, Remove or Access, returns
// from Evict a unit it must not (pinned, of another arena, stale, garbage)
// or nothing at all, before or after really evicting one, or panics. The
// cache must notice every breach that could matter (ErrPolicy, poisoned)
// and never serve a wrong byte or lose track of a slot.
type chaosPolicy struct {
	eviction.Policy[UnitID]
	world  *chaosWorld
	pinned map[UnitID]bool
	name   string
	tier   Tier
}

func newChaosPolicy(w *chaosWorld, p eviction.Policy[UnitID], name string, tier Tier) eviction.Policy[UnitID] {
	cp := &chaosPolicy{Policy: p, world: w, pinned: map[UnitID]bool{}, name: name, tier: tier}
	if _, ok := p.(eviction.Transactional); ok {
		return &transactionalChaos{cp}
	}
	return cp
}

// transactionalChaos is a chaosPolicy over a policy that can roll back.
type transactionalChaos struct{ *chaosPolicy }

func (p *transactionalChaos) Begin()    { p.Policy.(eviction.Transactional).Begin() }
func (p *transactionalChaos) Commit()   { p.Policy.(eviction.Transactional).Commit() }
func (p *transactionalChaos) Rollback() { p.Policy.(eviction.Transactional).Rollback() }

// misbehave reports whether this call breaks the contract, and how (one of
// n ways), counting it as kind.
func (p *chaosPolicy) misbehave(n int, kinds ...string) (int, bool) {
	if p.world.choose(p.world.oneIn) != 0 {
		return 0, false
	}
	k := p.world.choose(n)
	p.world.breaches[kinds[k]]++
	if p.world.trace != nil {
		p.world.trace(p.name + ": " + kinds[k])
	}
	if kinds[k] == "panic" {
		panic(fmt.Sprintf("chaos: %s panics", p.name))
	}
	return k, true
}

func (p *chaosPolicy) Insert(k UnitID, e eviction.Entry) error {
	p.world.seen = append(p.world.seen, k)
	if how, ok := p.misbehave(3, "insert refused", "insert swallowed", "panic"); ok {
		if how == 0 {
			return errChaos
		}
		return nil
	}
	return p.Policy.Insert(k, e)
}

func (p *chaosPolicy) Pin(k UnitID) {
	if _, ok := p.misbehave(2, "pin swallowed", "panic"); ok {
		return
	}
	p.pinned[k] = true
	p.Policy.Pin(k)
}

func (p *chaosPolicy) Unpin(k UnitID) {
	if _, ok := p.misbehave(2, "unpin swallowed", "panic"); ok {
		return
	}
	delete(p.pinned, k)
	p.Policy.Unpin(k)
}

func (p *chaosPolicy) Remove(k UnitID) {
	if _, ok := p.misbehave(2, "remove swallowed", "panic"); ok {
		return
	}
	delete(p.pinned, k)
	p.Policy.Remove(k)
}

func (p *chaosPolicy) Access(k UnitID) {
	if _, ok := p.misbehave(2, "access swallowed", "panic"); ok {
		return
	}
	p.Policy.Access(k)
}

func (p *chaosPolicy) Evict() (UnitID, bool) {
	if p.world.cpuPinnedLiar && p.tier > GPU {
		for k := range p.pinned {
			p.world.breaches["evict a pinned unit"]++
			return k, true
		}
	}
	how, ok := p.misbehave(7, "evict a pinned unit", "evict any unit ever seen", "evict garbage",
		"evict nothing", "evict one, return another", "evict twice the same", "panic")
	if !ok {
		return p.Policy.Evict()
	}
	w := p.world
	switch how {
	case 0:
		for k := range p.pinned {
			return k, true
		}
		return p.Policy.Evict()
	case 1:
		if len(w.seen) > 0 {
			return w.seen[w.choose(len(w.seen))], true
		}
	case 2:
		return UnitID(w.choose(1<<30)) << w.choose(40), true
	case 3:
		return 0, false
	case 4:
		// Destructive: the policy loses a key it tracked.
		if _, ok := p.Policy.Evict(); ok && len(w.seen) > 0 {
			return w.seen[w.choose(len(w.seen))], true
		}
	case 5:
		// A victim the cache already took back from it earlier.
		if k, ok := p.Policy.Evict(); ok {
			_ = p.Policy.Insert(k, eviction.NewEntry(1))
			return k, true
		}
	}
	return p.Policy.Evict()
}

// chaosFactory wraps the policies f builds in chaos policies of world w.
func chaosFactory(w *chaosWorld, f PolicyFactory) PolicyFactory {
	return func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p, err := f(info)
		if err != nil {
			return nil, err
		}
		return newChaosPolicy(w, p, fmt.Sprintf("%s policy of pool %d", info.Tier, info.Pool), info.Tier), nil
	}
}
