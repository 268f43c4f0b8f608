package kvcache

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The model-based test's asynchronous mode (modelConfig.async) runs the
// cache with manualEngine: the harness decides when each transfer
// completes, in random order, and fails some (a random prefix of the
// copies done, the next destination overwritten with garbage). The server
// it plays waits for Readiness before its kernels read or write a
// sequence's units, and recomputes what Readiness tells it to. Every check
// of the synchronous mode still holds: the plans, Stats and events count
// the moves as planned, and a failure adds its drop (an event) and
// TierStats.Failed; every unit that holds bytes by the cache's account
// holds exactly its tokens' bytes.

// errTransfer is the failure manualEngine injects, and errMissing the
// one it injects as a store that lacks a unit.
var (
	errTransfer = errors.New("injected transfer failure")
	errMissing  = fmt.Errorf("%w: injected", ErrUnitMissing)
)

// manualEngine is a TransferEngine whose transfers run when the harness
// says (progress, await, drain), or now and then at submission.
type manualEngine struct {
	h       *harness
	started []startedTransfer
}

type startedTransfer struct {
	copies []Copy
	done   func(error)
}

// Stores: see faultyMover.Stores.
func (e *manualEngine) Stores(t Tier) bool { return t > GPU }

func (e *manualEngine) Start(copies []Copy, done func(error)) {
	require.NotEmpty(e.h.t, copies, "step %d: a transfer without copies", e.h.steps)
	if e.h.choose(6) == 0 {
		e.h.counts["transfer done at submission"]++
		e.run(startedTransfer{copies: copies, done: done})
		return
	}
	e.started = append(e.started, startedTransfer{copies: copies, done: done})
}

// run performs tr, or fails it, and reports it done.
func (e *manualEngine) run(tr startedTransfer) {
	h := e.h
	if h.choose(100) < h.failPct && h.choose(2) == 0 {
		// Some copies fail, each on its own, as a store that misses
		// one unit of a batch: a failed copy leaves its destination
		// garbage or untouched, and the copies after it run, reading
		// what they read (garbage, when a failed copy was to write
		// it). The cache must trust exactly the rest.
		var errs CopyErrors
		for i, cp := range tr.copies {
			if h.choose(4) > 0 {
				require.NoError(h.t, h.store.Copy(tr.copies[i:i+1]))
				continue
			}
			if h.choose(2) == 0 {
				for j, dst := 0, h.store.Bytes(cp.To, cp.Pool, cp.ToSlot); j < len(dst); j++ {
					dst[j] = ^dst[j]
				}
			}
			err := errTransfer
			if h.choose(2) == 0 {
				// As a store that lacks the unit: the cache counts a
				// load (or copy) to the GPU from a store tier as
				// missing there, exactly once, and no other unit.
				err = errMissing
				if cp.To == GPU && cp.From > GPU {
					h.plans.missing[cp.From-1]++
				}
			}
			errs = errs.Set(i, len(tr.copies), err)
		}
		if errs == nil {
			// As some engines do: a CopyErrors without an error.
			errs = make(CopyErrors, len(tr.copies))
		}
		h.counts["transfer partly failed"]++
		tr.done(errs)
		return
	}
	if h.choose(100) < h.failPct {
		k := h.choose(len(tr.copies) + 1)
		require.NoError(h.t, h.store.Copy(tr.copies[:k]))
		if k < len(tr.copies) {
			cp := tr.copies[k]
			for i, dst := 0, h.store.Bytes(cp.To, cp.Pool, cp.ToSlot); i < len(dst); i++ {
				dst[i] = ^dst[i] // a copy that broke off
			}
		}
		h.counts["transfer failed"]++
		tr.done(errTransfer)
		return
	}
	require.NoError(h.t, h.store.Copy(tr.copies))
	h.counts["transfer done"]++
	tr.done(nil)
}

// runOne completes a random started transfer.
func (e *manualEngine) runOne() {
	i := e.h.choose(len(e.started))
	tr := e.started[i]
	e.started = slices.Delete(e.started, i, i+1)
	e.run(tr)
}

// inFlight returns how many transfers the cache has in flight.
func (h *harness) inFlight() int {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.c.xfer.inFlight
}

// progress completes a random number of started transfers, in random
// order, and polls.
func (h *harness) progress() {
	e := h.engine
	defer h.settle()
	if len(e.started) == 0 || h.choose(3) > 0 {
		// Transfers stay in flight over several operations: victims
		// moving down are needed back, loads are hit by others.
		return
	}
	for range h.choose(len(e.started) + 1) {
		e.runOne()
	}
	n, err := h.c.Poll()
	if h.policyBreached(err) {
		return
	}
	if n > 0 {
		h.counts["poll"]++
	}
}

// settle polls until no finished transfer is left to apply (a call
// applies a step's worth), so that the step's operation starts from a
// state that its own unlock does not change: a failed call must leave the
// cache as it found it.
func (h *harness) settle() {
	// declared is how far the commits that wait (Cache.xfer.declared)
	// have got: every call's unlock retries them, so the harness settles
	// them too, until a call makes no progress on them.
	declared := func() (n, done int) {
		for s := range h.c.xfer.declared {
			n++
			done += s.firstPrivate
		}
		return n, done
	}
	for i := 0; h.poisoned == nil; i++ {
		h.c.mu.Lock()
		applying := h.c.xfer.hasWork()
		n, done := declared()
		h.c.mu.Unlock()
		if !applying && n > 0 {
			if _, err := h.c.Poll(); h.policyBreached(err) {
				return
			}
			h.c.mu.Lock()
			n2, done2 := declared()
			h.c.mu.Unlock()
			if n2 == n && done2 == done {
				return
			}
			continue
		}
		if !applying {
			return
		}
		require.Less(h.t, i, 100000, "step %d: finished transfers never applied", h.steps)
		if _, err := h.c.Poll(); h.policyBreached(err) {
			return
		}
	}
}

// policyBreached reports whether err, from an operation that completes
// transfers (Poll, Readiness), is a chaos policy's breach met on the way,
// and notes the cache poisoned if so. Any other error fails the test.
func (h *harness) policyBreached(err error) bool {
	if errors.Is(err, ErrPolicy) {
		h.notePoisoned(err)
		h.counts["poisoned completing transfers"]++
		return true
	}
	require.NoError(h.t, err, "step %d", h.steps)
	return false
}

// await plays a server that waits until every transfer sequence id waits
// on is done (completing started transfers one by one, any of them, as
// an engine would), checking Readiness on the way, and records the
// ranges Readiness tells it to recompute as unwritten. It returns false
// when a chaos policy's breach, met while completing them, poisoned the
// cache.
func (h *harness) await(id SeqID) bool {
	e := h.engine
	var r Readiness
	idle := 0
	for i := 0; ; i++ {
		require.Less(h.t, i, 100000, "step %d: seq %d never ready", h.steps, id)
		if h.policyBreached(h.c.Readiness(id, &r)) {
			return false
		}
		h.checkReadiness(id, &r)
		if q := h.ref[id]; q != nil && len(r.Recompute) > 0 {
			q.unwritten = append(q.unwritten, r.Recompute...)
			h.counts["recompute after a failed load"]++
		}
		if r.Pending == 0 {
			return true
		}
		if !slices.Contains(r.Layers, true) {
			h.counts["wait, no layer ready"]++
		} else if slices.Contains(r.Layers, false) {
			h.counts["wait, some layers ready"]++
		}
		if len(e.started) == 0 {
			// Finished transfers wait to be applied (a step's worth
			// per call): the next calls go on with them, and must be
			// done with them in a few.
			idle++
			require.Less(h.t, idle, 1000, "step %d: seq %d waits on %d transfers, none started", h.steps, id, r.Pending)
			h.counts["readiness with moves left to apply"]++
			continue
		}
		idle = 0
		e.runOne()
	}
}

// checkReadiness verifies r against the cache's state: a layer reported
// ready reads no unit of the sequence that a transfer still brings.
func (h *harness) checkReadiness(id SeqID, r *Readiness) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seqs[id]
	require.NotNil(h.t, s)
	require.Len(h.t, r.Layers, c.geom.layers)
	for l, ok := range r.Layers {
		if !ok {
			require.Positive(h.t, r.Pending, "step %d: layer %d not ready with nothing pending", h.steps, l)
			continue
		}
		for sl := range c.geom.slices {
			if kv := c.geom.sliceLayer[sl]; kv >= 0 && kv != c.geom.layerKV[l] {
				continue
			}
			for i, slot := range s.table(sl) {
				if slot < 0 {
					continue
				}
				u := c.units.id(s.blocks[i], sl)
				require.False(h.t, c.units.of(u).loading(), "step %d: seq %d layer %d ready, but unit %d (block %d slice %d) is loading", h.steps, id, l, u, i, sl)
			}
		}
	}
}

// drain completes every transfer and polls until none is in flight, or
// until a chaos policy's breach poisons the cache.
func (h *harness) drain() {
	for i := 0; h.inFlight() > 0; i++ {
		require.Less(h.t, i, 100000, "transfers never drain")
		if len(h.engine.started) > 0 {
			h.engine.runOne()
		}
		if _, err := h.c.Poll(); h.policyBreached(err) {
			return
		}
	}
}

// TestModelAsync runs the model-based test over every configuration with
// a TransferEngine that completes transfers in random order and fails 10
// to 30% of them.
func TestModelAsync(t *testing.T) {
	steps := modelSize(2000, 1200, 600)
	runConfigs(t, modelConfigs(), func(t *testing.T, mc modelConfig) map[string]int {
		mc.async = true
		total, _ := runSeeds(t, mc, 1000, modelSeeds(t, 2), steps, nil)
		t.Logf("%v", total)
		for _, k := range []string{"acquire", "append", "sparse", "release", "truncate", "fork", "clear",
			"transfer done", "transfer failed", "transfer partly failed", "transfer done at submission", "poll"} {
			require.Positive(t, total[k], "%q never happened", k)
		}
		return total
	}, func(total map[string]int) {
		requireMet(t, total, "recompute after a failed load", "wait, some layers ready", "wait, no layer ready",
			"onboard", "truncate cow", "prefetch", "backups written")
	})
}
