package kvcache

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCopyErrors(t *testing.T) {
	missing := fmt.Errorf("%w: block 7", ErrUnitMissing)
	var errs CopyErrors
	errs = errs.Set(2, 4, missing)
	require.Len(t, errs, 4)
	errs = errs.Set(3, 4, errors.New("link down"))
	require.ErrorIs(t, errs, ErrUnitMissing)
	require.NotErrorIs(t, errs, ErrUnitCorrupt)
	require.Equal(t, "kvcache: 2 of 4 copies failed, the first: kvcache: unit missing from its store: block 7", errs.Error())
	require.Len(t, errs.Unwrap(), 2)
	require.Equal(t, 2, errs.Failed())
	require.Empty(t, make(CopyErrors, 3).Unwrap())
	require.NoError(t, make(CopyErrors, 3).Err())
	require.Equal(t, "kvcache: none of 3 copies failed", make(CopyErrors, 3).Error())
	require.NoError(t, CopyErrors(nil).Err())
	require.Equal(t, missing, CopyErrors{missing}.Err(), "a batch of one fails with its copy's error")
	require.Equal(t, error(errs), errs.Err())
}

// TestCopyFailuresFollowTheSlots: a copy that reads a slot an earlier
// failed copy of the transfer was to write fails too, even when the
// engine reports it done; once a completed copy rewrites that slot, a
// later read of it is good again.
func TestCopyFailuresFollowTheSlots(t *testing.T) {
	bad := errors.New("bad")
	copies := []Copy{
		{From: CPU, FromSlot: 1, To: GPU, ToSlot: 5},     // 0 fails
		{From: GPU, FromSlot: 5, To: GPU, ToSlot: 6},     // 1 reads 0's destination
		{From: GPU, FromSlot: 6, To: CPU, ToSlot: 2},     // 2 reads 1's: fails in turn
		{From: CPU, FromSlot: 3, To: GPU, ToSlot: 5},     // 3 rewrites slot 5
		{From: GPU, FromSlot: 5, To: GPU, ToSlot: 7},     // 4 reads it: good
		{Pool: 1, From: GPU, FromSlot: 6, To: CPU},       // 5 another pool's slot 6: good
		{From: CPU, FromSlot: 9, To: Tier(3), ToSlot: 1}, // 6 fails on its own
	}
	errs := copyFailures(copies, CopyErrors{bad, nil, nil, nil, nil, nil, bad})
	require.Len(t, errs, len(copies))
	var failed []int
	for i, err := range errs {
		if err != nil {
			failed = append(failed, i)
		}
	}
	require.Equal(t, []int{0, 1, 2, 6}, failed)
	require.ErrorIs(t, errs[2], ErrCopyFailed)
	require.ErrorIs(t, errs[2], bad, "names the failure it inherits")
	// (A plain error, a CopyErrors of another length and one without an
	// error are Cache.finish's to sort out before copyFailures:
	// TestAsyncCopyErrorsOfAnotherLengthFailTheTransfer.)
}

// TestAsyncPartlyFailedLoadRecomputesOnlyItsUnit: an engine reports that
// one load of a layer's transfer failed (CopyErrors); only that unit's
// block is recomputed, the rest of the transfer is kept, and another
// request reuses the other block with the right bytes.
func TestAsyncPartlyFailedLoadRecomputesOnlyItsUnit(t *testing.T) {
	c, e, events, prompt, other, plan, tr := layerOneInFlight(t)
	for i, cp := range tr.copies {
		if i == 1 {
			for j, dst := 0, e.store.Bytes(cp.To, cp.Pool, cp.ToSlot); j < len(dst); j++ {
				dst[j] = 0xEE
			}
			continue
		}
		require.NoError(t, e.store.Copy(tr.copies[i:i+1]))
	}
	var errs CopyErrors
	tr.done(errs.Set(1, 4, fmt.Errorf("%w: block 0 slice 1", ErrUnitMissing)))

	var r Readiness
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, []bool{true, true}, r.Layers)
	require.Equal(t, []TokenRange{{0, 4}}, r.Recompute, "only block 0 lacks its layer-1 unit")
	require.Equal(t, uint64(1), c.Stats().Tier(GPU).Failed)
	dropped := 0
	for _, ev := range *events {
		if ev.Kind == UnitMoved && ev.To == Dropped {
			dropped++
		}
	}
	require.Equal(t, 1, dropped, "only the failed unit is reported dropped; both victims reached the CPU")
	require.NoError(t, c.checkInvariants())

	// Meanwhile another request would reuse block 1 and recompute block 0.
	b, err := c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, b.ReusedTokens, "block 1 only")
	writeBlocks(t, c, e.store, plan.Seq, prompt, 0, 1)
	require.NoError(t, c.Commit(plan.Seq, 8))
	requireBlocks(t, c, e.store, plan.Seq, prompt)
	d, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, d.Hits)
	requireBlocks(t, c, e.store, d.Seq, prompt)
	// The victims moved down by the same transfer are there too.
	require.NoError(t, c.Release(d.Seq))
	require.NoError(t, c.Release(plan.Seq))
	o, err := c.Acquire(Request{Tokens: other})
	require.NoError(t, err)
	require.Equal(t, 4, o.Hits+o.Onboarded, "every unit of the other prompt is still cached")
	e.completeAll(t, c)
	requireBlocks(t, c, e.store, o.Seq, other)
	require.NoError(t, c.checkInvariants())
}

// TestAsyncCopyErrorsOfAnotherLengthFailTheTransfer: an engine's
// CopyErrors without an error is success, one of another length than the
// transfer fails it whole, and one wrapped in another error is found.
func TestAsyncCopyErrorsOfAnotherLengthFailTheTransfer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       func(n int) error
		recompute []TokenRange
		failed    uint64
	}{
		{"all nil", func(n int) error { return make(CopyErrors, n) }, nil, 0},
		{"another length", func(n int) error { return CopyErrors{errors.New("lost")} }, []TokenRange{{0, 8}}, 2},
		{"wrapped", func(n int) error {
			var errs CopyErrors
			return fmt.Errorf("engine: %w", errs.Set(3, n, errors.New("lost")))
		}, []TokenRange{{4, 8}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, e, _, _, _, plan, tr := layerOneInFlight(t)
			require.NoError(t, e.store.Copy(tr.copies))
			tr.done(tc.err(len(tr.copies)))
			var r Readiness
			require.NoError(t, c.Readiness(plan.Seq, &r))
			require.Equal(t, tc.recompute, r.Recompute)
			require.Equal(t, tc.failed, c.Stats().Tier(GPU).Failed)
			require.NoError(t, c.checkInvariants())
		})
	}
}

// layerOneInFlight loads a prompt of two blocks cached on the CPU of an
// asyncCache (two units per block, one per layer): layer 0's transfer is
// done, and layer 1's, taken from the engine and returned, is not (its
// copies: a victim down, the load of block 0, a victim down, the load of
// block 1). The events so far are cleared.
func layerOneInFlight(t *testing.T) (c *Cache, e *queueEngine, events *[]Event, prompt, other []uint32, plan Plan, tr startedTransfer) {
	t.Helper()
	c, e, events = asyncCache(t, Capacity{Units: 4}, Capacity{Units: 8})
	prompt, other = seqTokens(8, 100), seqTokens(8, 200)
	cachedOnCPU(t, c, e, prompt, other)
	*events = (*events)[:0]
	plan, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Len(t, e.started, 2, "one transfer per KV layer")
	e.complete(t, 0, nil)
	tr = e.started[0]
	e.started = e.started[1:]
	require.Equal(t, []Tier{CPU, GPU, CPU, GPU}, []Tier{tr.copies[0].To, tr.copies[1].To, tr.copies[2].To, tr.copies[3].To})
	return c, e, events, prompt, other, plan, tr
}
