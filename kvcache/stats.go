package kvcache

// counters are the cache-wide statistics kept under the lock.
type counters struct {
	offloads, onboards, copies uint64
	bytesMoved                 int64
	recomputed                 int64
	partial                    int64
	stored, removed            uint64
	aborted                    uint64
	pruned                     uint64
}

// TierStats describes one tier, summed over its pools. Slots are unit slots:
// Capacity = Free + Pinned + Cached.
type TierStats struct {
	// Name is the tier's name (TierConfig.Name).
	Name string
	// Capacity, Free, Pinned and Cached count slots: all of them, the free
	// ones, those holding a pinned unit and those holding an evictable
	// cached unit. Only the GPU pins units between operations.
	Capacity, Free, Pinned, Cached int64
	// CapacityBytes, FreeBytes, PinnedBytes and CachedBytes are the same in
	// bytes.
	CapacityBytes, FreeBytes, PinnedBytes, CachedBytes int64
	// Hits and Misses count unit lookups (those of a dense Acquire and of
	// SparseAccess): a unit a sequence needed was on this tier, or not,
	// among the lookups that reached it. The GPU sees every lookup; tier t
	// below it sees the misses of tier t-1, so its Hits + Misses equal
	// them. A unit found below but in a block that is recomputed anyway
	// (its copy is released, not loaded) is a miss on every tier.
	Hits, Misses uint64
	// Evictions counts the victims the tier's policies chose; Drops those
	// of them that were dropped (the others moved down a tier).
	Evictions, Drops uint64
	// MovedIn counts the units this tier received from the tier above,
	// and MovedInBytes their bytes (an eviction to a backup, see
	// Backups, counts too though it copied nothing). Failed counts, with
	// a TransferEngine, the units whose transfer into this tier failed
	// (see Cache.Poll): loads and copies for the GPU, moves down below
	// it.
	MovedIn, Failed uint64
	MovedInBytes    int64
	// Lost counts units dropped because a Mover panicked during a batch
	// that would have written their slots: their bytes are unknown.
	Lost uint64
	// Backups is, on the write-through tier (TierConfig.WriteThrough),
	// how many of its slots hold the backups of units on the tiers above
	// (counted in Cached, or in Pinned while being written), and
	// BackupsWritten how many backups it received; an eviction that
	// moved a unit down to its backup is counted in Evictions and
	// MovedIn but copied nothing.
	Backups        int64
	BackupsWritten uint64
	// Missing and Corrupt count, on a tier the engine keeps in a store
	// (its Stores, see KeyedEngine), the units of failed loads from it
	// whose error wraps ErrUnitMissing or ErrUnitCorrupt: each unit's own
	// error when the engine reports one per copy (CopyErrors), else the
	// transfer's, which then counts every unit it loaded from the tier.
	// A load failed because a transfer it depends on failed is not
	// counted. The units were recomputed, never served.
	Missing, Corrupt uint64
	// Adopted counts the units Cache.Adopt registered on this tier.
	Adopted uint64
	// Shares holds, for a tier with TierConfig.Shares, what each share
	// holds, in the order of the configuration.
	Shares []ShareStats
}

// HitRate returns Hits / (Hits + Misses), or 0 before any lookup.
func (t TierStats) HitRate() float64 {
	if t.Hits+t.Misses == 0 {
		return 0
	}
	return float64(t.Hits) / float64(t.Hits+t.Misses)
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	// Tiers holds one TierStats per tier, in the order of Config.Tiers:
	// Tiers[t-1] is tier t (see Tier).
	Tiers []TierStats
	// Offloads counts units moved down a tier (any tier), Onboards units
	// copied to the GPU from a lower tier, Copies copy-on-write unit
	// copies.
	Offloads, Onboards, Copies uint64
	// BytesMoved is the bytes of every move down, onboard and copy.
	BytesMoved int64
	// RecomputedTokens counts tokens of cached blocks that requests had to
	// recompute because a unit was dropped. Acquire, Truncate and Fork
	// count each recomputed block's tokens once (Plan.RecomputeTokens).
	// SparseAccess counts, once per call, the tokens of each selected block
	// with at least one dropped unit, however many of its units (heads)
	// were dropped: the server rebuilds one layer's KV of a block from the
	// block's tokens in one pass. A block recomputed for several layers
	// counts once per layer's call.
	RecomputedTokens int64
	// PartialTokens counts the prompt tokens Acquire copied out of cached
	// blocks that agreed with a block of the prompt on part of it
	// (Config.PartialReuse, Plan.PartialTokens) instead of computing them.
	PartialTokens int64
	// Stored and Removed count blocks committed to and removed from the
	// prefix tree; Blocks is how many it holds now, of which HollowBlocks
	// hold no bytes and no live sequence uses; PrunedBlocks counts those
	// removed (with their subtrees) to keep the tree within
	// Config.MaxBlocks.
	Stored, Removed uint64
	Blocks          int
	HollowBlocks    int
	PrunedBlocks    uint64
	// BlockRecords is the live block records: tree blocks and the
	// sequences' private blocks. MetadataBytes estimates the memory they
	// take (the records, their unit tables, the tree's nodes and the
	// policies' entries); freed records are kept for reuse, so the heap
	// holds the most records ever live at once.
	BlockRecords  int
	MetadataBytes int64
	// Sequences is the number of live sequences; Aborted counts those
	// ended by Abort (or by a Mover's panic, see ErrCopyFailed).
	Sequences int
	Aborted   uint64
	// Transfers is how many transfers are in flight, with a
	// TransferEngine: started, or waiting for one they read from.
	Transfers int
	// EventsBuffered is how many events wait in the TakeEvents buffer;
	// EventsDropped counts those the full buffer dropped; SinkPanics the
	// panics of the event sink (recovered, see Cache.SinkPanic).
	EventsBuffered int
	EventsDropped  uint64
	SinkPanics     uint64
}

// Tier returns the stats of tier t, or the zero TierStats for a tier the
// cache does not have.
func (s Stats) Tier(t Tier) TierStats {
	if t < GPU || int(t) > len(s.Tiers) {
		return TierStats{}
	}
	return s.Tiers[t-1]
}

// Stats returns a snapshot of the counters. It takes the lock for a time
// proportional to the number of arenas, not to the cache's size. Called
// from a policy, Mover, Decider or cost model callback, it returns the
// counters as they were before the running operation (see ErrReentrant).
func (c *Cache) Stats() Stats {
	if c.mu.TryLock() {
		defer c.mu.Unlock()
		return c.stats()
	}
	if onStack(heldCallbacks) {
		return c.snapshot() // this goroutine holds the lock
	}
	c.lockWait()
	defer c.mu.Unlock()
	return c.stats()
}

// snapshot returns a copy of c.snap that shares nothing with it.
func (c *Cache) snapshot() Stats {
	s := c.snap
	s.Tiers = append([]TierStats(nil), s.Tiers...)
	for i := range s.Tiers {
		s.Tiers[i].Shares = append([]ShareStats(nil), s.Tiers[i].Shares...)
	}
	return s
}

// stats computes Stats (Cache.mu held).
func (c *Cache) stats() Stats {
	var s Stats
	c.fillStats(&s)
	return s
}

// fillStats computes Stats into s, reusing its Tiers (Cache.mu held).
func (c *Cache) fillStats(s *Stats) {
	tiers := s.Tiers[:0]
	*s = Stats{
		Offloads: c.st.offloads, Onboards: c.st.onboards, Copies: c.st.copies,
		BytesMoved: c.st.bytesMoved, RecomputedTokens: c.st.recomputed, PartialTokens: c.st.partial,
		Stored: c.st.stored, Removed: c.st.removed, Blocks: c.tree.Len(),
		Sequences: len(c.seqs), Aborted: c.st.aborted, Transfers: c.xfer.inFlight,
		HollowBlocks: c.meta.count, PrunedBlocks: c.st.pruned, BlockRecords: c.units.live(), MetadataBytes: c.metadataBytes(),
		EventsBuffered: c.events.n, EventsDropped: c.events.dropped, SinkPanics: c.events.panics.Load(),
	}
	for i := range c.tiers.levels {
		l := &c.tiers.levels[i]
		ts := TierStats{Name: l.name}
		for p, a := range l.arenas {
			addArena(&ts, a, c.geom.pools[p].unitBytes)
		}
		tiers = append(tiers, ts)
	}
	s.Tiers = tiers
}

func addArena(t *TierStats, a *arena, unit int64) {
	capacity, free := int64(a.capacity()), int64(len(a.free))
	pinned := int64(a.pinned)
	cached := int64(a.tracked - a.pinned)
	t.Capacity += capacity
	t.Free += free
	t.Pinned += pinned
	t.Cached += cached
	t.CapacityBytes += capacity * unit
	t.FreeBytes += free * unit
	t.PinnedBytes += pinned * unit
	t.CachedBytes += cached * unit
	t.Hits += a.hits
	t.Misses += a.misses
	t.Evictions += a.evictions
	t.Drops += a.drops
	t.MovedIn += a.moved
	t.MovedInBytes += int64(a.moved) * unit
	t.Failed += a.failed
	t.Lost += a.lost
	t.Backups += int64(a.backups)
	t.BackupsWritten += a.backupsWritten
	t.Missing += a.missing
	t.Corrupt += a.corrupt
	t.Adopted += a.adopted
	if at := a.tenants; at != nil {
		if t.Shares == nil {
			t.Shares = make([]ShareStats, len(at.list)-1)
		}
		for i := range at.list[1:] {
			x, sh := &at.list[i+1], &t.Shares[i]
			sh.Namespace = x.namespace
			sh.Reserved += x.reserve
			sh.Cap += x.cap
			sh.Used += x.used
			sh.Evictions += x.evictions
			sh.DropsAtCap += x.dropsAtTheCap
		}
	}
}
