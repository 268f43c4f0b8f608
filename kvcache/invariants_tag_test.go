//go:build kvtier_invariants

package kvcache

import (
	"errors"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// TestInvariantChecksCatchTheCall: in a build with the kvtier_invariants
// tag, the call after which the accounting is wrong fails with
// ErrInvariant, and the cache stays poisoned.
func TestInvariantChecksCatchTheCall(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{Units: 16})})
	require.NoError(t, err)
	plan, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err, "a sound call passes the check")
	_, err = c.Append(plan.Seq, 1)
	require.NoError(t, err)

	// Damage the state as a defect would: a pin no sequence holds.
	c.mu.Lock()
	st := c.units.of(c.units.id(c.seqs[plan.Seq].blocks[0], 0))
	st.pins++
	c.mu.Unlock()

	_, err = c.Append(plan.Seq, 2)
	require.ErrorIs(t, err, ErrInvariant)
	require.Contains(t, err.Error(), "pin")
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 50)})
	require.True(t, errors.Is(err, ErrInvariant), "poisoned: %v", err)
}
