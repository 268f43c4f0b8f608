package kvcache

import (
	"errors"
	"fmt"
)

// Prefetch brings the cached prefix of req's prompt up to the GPU ahead of
// the request's Acquire, as a server does for requests it has queued but
// not scheduled yet: the longest cached prefix of whole blocks (every unit
// holding bytes, on any tier) is matched, and its units on lower tiers are
// onboarded into GPU slots, evicting others as an Acquire would. The units
// are not pinned: they are cached on the GPU like any other, evictable
// once loaded, so a prefetch never takes room a running request needs
// (while a TransferEngine loads them they are held, as every unit in
// flight). An Acquire that comes later hits them, or waits for their
// loads (Readiness).
//
// When the GPU cannot take the whole prefix, Prefetch takes the longest
// part of it (halving) that fits, possibly nothing. A prefix whose units
// exceed a step of a long operation (see slices.go) is brought up in
// steps, as a long Acquire would bring it: its units on the GPU pinned
// first, then the others loaded a slice of blocks at a time, cut at the
// longest part whose slots the GPU can supply, all left unpinned at the
// end. It returns what it did:
// Onboarded, the victims Offloaded or Dropped, and as Hits the prefix's
// units on the GPU already (kept from eviction while the others come in,
// which pins and unpins them in their policies; Stats does not count them
// as lookups: the later Acquire's are). It
// returns an error wrapping ErrInvalidRequest for bad extra keys or
// MaxLoadTokens, ErrCopyFailed when the Mover failed (nothing is then
// changed) and ErrPolicy when a policy broke its contract. Fields of req
// other than the prompt, keys and MaxLoadTokens are ignored; a positive
// MaxLoadTokens caps the tokens prefetched.
func (c *Cache) Prefetch(req Request) (_ Counts, err error) {
	if req.MaxLoadTokens < 0 {
		return Counts{}, fmt.Errorf("%w: MaxLoadTokens %d is negative", ErrInvalidRequest, req.MaxLoadTokens)
	}
	if err := c.lock("Prefetch"); err != nil {
		return Counts{}, err
	}
	c.applyFinishedLocked()
	k, err := c.prefetchable(req)
	if err != nil || k == 0 {
		c.unlock(&err)
		return Counts{}, err
	}
	if !c.isLong(k * c.geom.slices) {
		counts, err := c.prefetchFit(req, k)
		c.unlock(&err)
		return counts, err
	}
	// A long prefix is brought up in steps (see slices.go).
	c.unlock(&err)
	if err != nil {
		return Counts{}, err
	}
	return c.prefetchLong(req)
}

// prefetchable returns how many blocks Prefetch of req would bring up
// (Cache.mu held): its whole cached prefix, capped by MaxLoadTokens.
func (c *Cache) prefetchable(req Request) (int, error) {
	if c.poisoned != nil {
		return 0, c.poisoned
	}
	_, nodes, err := c.match(&req)
	if err != nil {
		return 0, err
	}
	k := c.wholePrefix(nodes)
	if req.MaxLoadTokens > 0 {
		k = min(k, max(1, req.MaxLoadTokens/c.geom.blockTokens))
	}
	return k, nil
}

// prefetchFit is Prefetch of the first k blocks of req's prefix in one
// transaction (Cache.mu held), halved until it fits.
func (c *Cache) prefetchFit(req Request, k int) (Counts, error) {
	_, nodes, err := c.match(&req)
	if err != nil {
		return Counts{}, err
	}
	blocks := make([]int32, k)
	for i, n := range nodes[:k] {
		blocks[i] = n.Value
	}
	for k > 0 {
		counts, err := c.prefetch(blocks[:k])
		if !errors.Is(err, ErrNoSpace) {
			return counts, err
		}
		k /= 2
	}
	return Counts{}, nil
}

// prefetch onboards the units of blocks that are below the GPU, in one
// transaction, and leaves every unit of blocks unpinned.
func (c *Cache) prefetch(blocks []int32) (Counts, error) {
	c.begin(nil)
	onboards := false
	for _, b := range blocks {
		for sl := range c.geom.slices {
			// The units on the GPU already are needs too (hits): none of
			// them is evicted to make room for the others.
			onboards = c.tx.addNeed(&c.units, c.units.id(b, sl)) == actOnboard || onboards
		}
	}
	if !onboards {
		return Counts{Hits: len(c.tx.needs)}, nil
	}
	if err := c.execute(); err != nil {
		return Counts{}, err
	}
	counts := c.countUnits()
	// Last block first, as Release unpins: a recency policy keeps the
	// prefix's first blocks longest.
	for i := len(c.tx.needs) - 1; i >= 0; i-- {
		c.unpinUnit(c.tx.needs[i].u)
	}
	return counts, nil
}
