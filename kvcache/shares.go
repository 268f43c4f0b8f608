package kvcache

import (
	"fmt"
	"math"

	"github.com/kvtier/kvtier/eviction"
)

// Share is a namespace's share of a tier (TierConfig.Shares): a
// reservation no other namespace can evict it below, and a cap it cannot
// grow past. Both are fractions of each of the tier's arenas (one per
// layout pool), rounded down to slots. A namespace's slots are those its
// units hold, pinned or cached; a unit that an operation loads to the GPU
// holds its slot below until the operation ends (with an Engine, until
// its transfer is done).
//
// A tier with shares gives each namespace that has one a policy of its
// own, built by the tier's factory (PoolInfo.Slots is then the
// namespace's cap), and one policy to all the other namespaces together.
// The policies order each namespace's units; the shares decide whose unit
// leaves when the tier needs a slot for a unit of namespace N:
//
//   - N at its cap takes no free slot: one of its own units leaves, or, if
//     it has none to lose, the unit entering is dropped;
//   - otherwise a free slot, if any; else a unit leaves of the namespace
//     (N's included) that holds the most slots above its reservation, among
//     those whose reservation it exceeds and N itself. When none has a unit
//     to lose, the entering unit is dropped.
//
// So no namespace loses a unit to another's while it holds no more than
// its reservation, and one over its share loses its own units before
// anyone within theirs. Units enter a tier below the GPU when the tier
// above evicts them, when Adopt registers them and as write-through
// backups (which take free slots only, and none at the cap); none of these
// fails for want of room, they drop the unit instead. On the GPU a request
// needs its room: Acquire, Append, Fork and Truncate fail with ErrNoSpace
// when the shares leave too few slots to the request's namespace (Admit
// says so beforehand), a cap there bounds what a tenant's live sequences
// hold, and a reservation keeps a tenant's cached prefixes from the
// others' requests.
type Share struct {
	// Namespace is the namespace (Request.Namespace) the share is for.
	Namespace string
	// Reserve is the fraction of each arena that the namespace keeps: no
	// unit of it leaves the tier for another namespace's while it holds
	// no more slots than that. From 0 to 1; a tier's reserves add up to
	// at most 1.
	Reserve float64
	// Cap is the most of each arena the namespace holds, from Reserve to
	// 1; 0 means 1 (no cap).
	Cap float64
}

// tenants holds a cache's namespaces that have a share of some tier: a
// block record keeps its namespace's number (blockRec.tenant, 0 for every
// namespace without a share), which each arena maps to a tenant of its
// own.
type tenants struct {
	ids   map[string]uint8
	names []string // by number, from 1
}

// maxTenants is the most namespaces with shares a cache has (block
// records keep the number in a byte).
const maxTenants = 255

// tenantOf returns the number of namespace ns, 0 when it has no share.
func (c *Cache) tenantOf(ns string) uint8 {
	if c.tenants.ids == nil {
		return 0
	}
	return c.tenants.ids[ns]
}

// validateShares checks the Shares of tier i (named name).
func validateShares(cfg *Config, i int, name string) error {
	shares := cfg.Tiers[i].Shares
	if len(shares) == 0 {
		return nil
	}
	if cfg.BlockKeys {
		return fmt.Errorf("%w: tier %d (%s) has Shares and the cache BlockKeys: they cannot be combined", ErrInvalidConfig, i+1, name)
	}
	seen := map[string]bool{}
	total := 0.0
	for _, s := range shares {
		if seen[s.Namespace] {
			return fmt.Errorf("%w: tier %d (%s) has two Shares for namespace %q", ErrInvalidConfig, i+1, name, s.Namespace)
		}
		seen[s.Namespace] = true
		if !(s.Reserve >= 0 && s.Reserve <= 1) {
			return fmt.Errorf("%w: tier %d (%s) share of namespace %q: Reserve %v is not between 0 and 1", ErrInvalidConfig, i+1, name, s.Namespace, s.Reserve)
		}
		if !(s.Cap >= 0 && s.Cap <= 1) || (s.Cap != 0 && s.Cap < s.Reserve) {
			return fmt.Errorf("%w: tier %d (%s) share of namespace %q: Cap %v is not between its Reserve %v and 1 (or 0)", ErrInvalidConfig, i+1, name, s.Namespace, s.Cap, s.Reserve)
		}
		total += s.Reserve
	}
	if total > 1+1e-9 {
		return fmt.Errorf("%w: tier %d (%s) Shares reserve %v of it in all, more than 1", ErrInvalidConfig, i+1, name, total)
	}
	return nil
}

// numberTenants gives each namespace with a share of some tier of cfg its
// number.
func (c *Cache) numberTenants(cfg *Config) error {
	for _, tc := range cfg.Tiers {
		for _, s := range tc.Shares {
			if c.tenants.ids == nil {
				c.tenants.ids = map[string]uint8{}
				c.tenants.names = []string{""}
			}
			if _, ok := c.tenants.ids[s.Namespace]; ok {
				continue
			}
			if len(c.tenants.names) > maxTenants {
				return fmt.Errorf("%w: more than %d namespaces have Shares", ErrInvalidConfig, maxTenants)
			}
			c.tenants.ids[s.Namespace] = uint8(len(c.tenants.names))
			c.tenants.names = append(c.tenants.names, s.Namespace)
		}
	}
	return nil
}

// arenaTenants is the namespaces' shares of one arena.
type arenaTenants struct {
	// of maps a cache tenant number to the arena's tenant: 0 for the
	// namespaces without a share of this tier.
	of []uint8
	// list holds the arena's tenants; list[0] is every namespace without
	// a share, whose policy is the arena's own (arena.policy).
	list []tenant
	// slot holds the tenant of each used slot's owner.
	slot []uint8
}

// tenant is one namespace's part of an arena (or, for the arena's tenant
// 0, that of every namespace without a share).
type tenant struct {
	namespace     string
	reserve, cap  int
	pol           policySet
	used          int // slots its units own (tracked or being placed)
	tracked       int // its units the policy tracks
	pinned        int // of them pinned
	evictions     uint64
	dropsAtTheCap uint64
}

// policySet is a policy with the optional interfaces it implements.
type policySet struct {
	p  eviction.Policy[UnitID]
	tx eviction.Transactional
	pi eviction.PinnedInserter[UnitID]
	fg eviction.Forgetter[UnitID]
}

func newPolicySet(p eviction.Policy[UnitID]) policySet {
	tp, _ := p.(eviction.Transactional)
	pi, _ := p.(eviction.PinnedInserter[UnitID])
	fg, _ := p.(eviction.Forgetter[UnitID])
	return policySet{p: p, tx: tp, pi: pi, fg: fg}
}

// evictable is how many of the tenant's tracked units an eviction could
// take.
func (t *tenant) evictable() int { return t.tracked - t.pinned }

// surplus is how many of the tenant's units another namespace's unit can
// take the place of: those above its reservation, as far as they are
// evictable.
func (t *tenant) surplus() int { return min(t.evictable(), max(0, t.used-t.reserve)) }

// shareArena gives arena a, built with info, the shares of its tier: a
// policy per share from factory f.
func (c *Cache) shareArena(a *arena, info PoolInfo, shares []Share, f PolicyFactory) error {
	if len(shares) == 0 {
		return nil
	}
	n := a.capacity()
	at := &arenaTenants{of: make([]uint8, len(c.tenants.names)), slot: make([]uint8, n)}
	at.list = append(at.list, tenant{reserve: 0, cap: n, pol: a.pols()})
	for _, s := range shares {
		cp := s.Cap
		if cp == 0 {
			cp = 1
		}
		t := tenant{namespace: s.Namespace, reserve: int(math.Floor(s.Reserve * float64(n))), cap: int(math.Floor(cp * float64(n)))}
		ti := info
		ti.Slots = t.cap
		p, keys, err := callFactory(f, ti)
		switch {
		case err != nil:
			return fmt.Errorf("%w: %s policy of pool %d for namespace %q: %w", ErrInvalidConfig, info.TierName, info.Pool, s.Namespace, err)
		case p == nil:
			return fmt.Errorf("%w: %s policy factory returned nil for pool %d, namespace %q", ErrInvalidConfig, info.TierName, info.Pool, s.Namespace)
		case keys != 0:
			return fmt.Errorf("%w: %s policy of pool %d for namespace %q is not empty (%d keys)", ErrInvalidConfig, info.TierName, info.Pool, s.Namespace, keys)
		}
		t.pol = newPolicySet(p)
		own := at.list[0].pol
		if (t.pol.tx == nil) != (own.tx == nil) || (t.pol.pi == nil) != (own.pi == nil) || (t.pol.fg == nil) != (own.fg == nil) || tellsHits(p) != a.tellHits {
			return fmt.Errorf("%w: %s policy of pool %d for namespace %q implements other optional interfaces (Transactional, PinnedInserter, Forgetter, PinnedAccessIgnorer) than the tier's own: a tier's factory must build policies of one kind", ErrInvalidConfig, info.TierName, info.Pool, s.Namespace)
		}
		at.of[c.tenants.ids[s.Namespace]] = uint8(len(at.list))
		at.list = append(at.list, t)
	}
	a.tenants = at
	return nil
}

// pols returns the arena's own policy (tenant 0's) as a policySet.
func (a *arena) pols() policySet {
	return policySet{p: a.policy, tx: a.txPolicy, pi: a.pinnedInserter, fg: a.forgetter}
}

// tenantOf returns the arena's tenant of unit u's block.
func (a *arena) tenantOf(u UnitID) int {
	return int(a.tenants.of[a.cache.units.rec(u).tenant])
}

// policyFor returns the policy that orders unit u: its tenant's.
func (a *arena) policyFor(u UnitID) *policySet {
	if a.tenants == nil {
		return nil
	}
	return &a.tenants.list[a.tenantOf(u)].pol
}

// setOwner makes u (noUnit: nobody) the owner of slot s, counting the
// slots each tenant's units own.
func (a *arena) setOwner(s int32, u UnitID) {
	if at := a.tenants; at != nil {
		if a.owner[s] != noUnit {
			at.list[at.slot[s]].used--
		}
		if u != noUnit {
			t := a.tenantOf(u)
			at.slot[s] = uint8(t)
			at.list[t].used++
		}
	}
	a.owner[s] = u
}

// countTracked changes the tracked and pinned counts of u's tenant.
func (a *arena) countTracked(u UnitID, dt, dp int) {
	if a.tenants == nil {
		return
	}
	t := &a.tenants.list[a.tenantOf(u)]
	t.tracked += dt
	t.pinned += dp
}

// atCap reports whether u's tenant holds as many slots as its cap: u
// enters the arena only in place of one of the tenant's own.
func (a *arena) atCap(u UnitID) bool {
	if a.tenants == nil {
		return false
	}
	t := &a.tenants.list[a.tenantOf(u)]
	return t.used >= t.cap
}

// roomFor returns how many units of tenant t an operation can place in
// the arena: free slots or evictions when evict says so, within the
// shares (see Share).
func (at *arenaTenants) roomFor(t int, free int, evict bool) int {
	me := &at.list[t]
	head := max(0, me.cap-me.used)
	if !evict {
		return min(free, head)
	}
	others := free
	for i := range at.list {
		if i != t {
			others += at.list[i].surplus()
		}
	}
	return me.evictable() + min(head, others)
}

// availableTo is available for the units of namespace number ns: the
// slots an operation placing them can obtain, free or by evictions the
// shares allow, less those promised to long operations. Without shares it
// is available. Subtracting every reservation from what a namespace can
// obtain, whatever the units a reservation counted on, keeps each one
// whole: another namespace's operation then takes at most what would be
// left if the reservation were already taken (see ARCHITECTURE.md).
func (a *arena) availableTo(ns uint8) int {
	at := a.tenants
	if at == nil {
		return a.available()
	}
	return at.roomFor(int(at.of[ns]), len(a.free)+len(a.spare)-a.spareNext, true) - a.reserved
}

// victimTenant returns the tenant whose unit leaves to make room for a
// unit of tenant t (see Share), or -1 when none can lose one.
func (at *arenaTenants) victimTenant(t int) int {
	me := &at.list[t]
	if me.used >= me.cap {
		if me.evictable() > 0 {
			return t
		}
		return -1
	}
	best, over := -1, 0
	for i := range at.list {
		x := &at.list[i]
		if x.evictable() == 0 || (i != t && x.used <= x.reserve) {
			continue
		}
		if o := x.used - x.reserve; best < 0 || o > over {
			best, over = i, o
		}
	}
	return best
}

// takeSharedSlot is takeSlot in an arena with shares, for unit u.
func (c *Cache) takeSharedSlot(a *arena, t Tier, p int, u UnitID) (int32, bool, error) {
	at := a.tenants
	me := a.tenantOf(u)
	var vt int
	switch {
	case a.atCap(u):
		vt = at.victimTenant(me) // its own, or none
	case c.ownFirst(a, p, me):
		vt = me
	default:
		if s, ok := a.pop(); ok {
			c.tx.log(undoRec{kind: undoSlot, tier: t, pool: int32(p), slot: s, u: noUnit})
			return s, true, nil
		}
		vt = at.victimTenant(me)
	}
	if vt < 0 {
		return 0, false, nil
	}
	v, ok := a.policyEvictTenant(vt)
	if !ok {
		return 0, false, c.poison(a, "Evict of namespace %q found no victim among %d evictable units", at.list[vt].namespace, at.list[vt].evictable())
	}
	if !c.units.current(v, c.geom.slices) || a.tenantOf(v) != vt {
		return 0, false, c.poison(a, "Evict of namespace %q returned %d, not one of its units", at.list[vt].namespace, v)
	}
	a.tracked--
	at.list[vt].tracked--
	return c.evictUnit(a, t, p, v, false)
}

// ownFirst reports whether a unit of tenant me takes the place of one of
// me's own units rather than a free slot or another tenant's: when me has
// evictable units no other tenant can take (those within its reservation)
// and the slots any tenant can take (free, and the others' surplus) are no
// more than what other long operations have reserved. Their reservations
// counted on those shared slots, and me's capacity check on its own units
// (availableTo); taking a shared slot would leave a reservation short
// while one of me's own was there to lose. Evicting one of those does not
// shrink the shared slots: me's surplus stays what it was.
func (c *Cache) ownFirst(a *arena, p int, me int) bool {
	at := a.tenants
	x := &at.list[me]
	if a.reserved == 0 || x.evictable() <= x.surplus() {
		return false
	}
	others := a.reserved
	if r := c.tx.reserve; r != nil {
		others -= r[p] // a long operation's own step: its reservation is its own
	}
	shared := len(a.free)
	for i := range at.list {
		if i != me {
			shared += at.list[i].surplus()
		}
	}
	return shared <= others
}

// ShareStats is what a namespace's Share of a tier holds, summed over the
// tier's arenas (TierStats.Shares).
type ShareStats struct {
	// Namespace is the share's namespace.
	Namespace string
	// Reserved and Cap are the share's slots; Used how many slots the
	// namespace's units own now.
	Reserved, Cap, Used int
	// Evictions counts the namespace's units the tier evicted.
	Evictions uint64
	// DropsAtCap counts the units of the namespace that the tier above
	// evicted and that could not enter this tier because the namespace
	// was at its cap with no unit of its own to lose (they were dropped).
	// Write-through backups and Adopt, which stop at the cap, are not
	// counted.
	DropsAtCap uint64
}
