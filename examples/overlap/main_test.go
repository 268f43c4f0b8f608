package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLayerWiseHidesCopies runs both modes on a small workload: the same
// units are onboarded, and starting each layer when it is ready gives a
// shorter TTFT and hides copy time that whole-request onboarding does not.
func TestLayerWiseHidesCopies(t *testing.T) {
	cfg := defaults()
	cfg.sessions, cfg.turns = 4, 3
	cfg.gpuUnits = 4096
	var out bytes.Buffer
	require.NoError(t, run(&out, cfg, true))
	dec := json.NewDecoder(&out)
	var lw, whole result
	require.NoError(t, dec.Decode(&lw))
	require.NoError(t, dec.Decode(&whole))
	require.Equal(t, "layer-wise", lw.Mode)
	require.Positive(t, lw.Onboarded, "histories come back from the CPU")
	require.Equal(t, lw.Onboarded, whole.Onboarded, "same workload, same loads")
	require.Equal(t, lw.Turns, whole.Turns)
	require.Less(t, lw.MeanTTFT, whole.MeanTTFT)
	require.Greater(t, lw.Hidden, 0.2)
	require.Less(t, whole.Hidden, 0.05, "nothing overlaps when the prefill waits for every load")
	var wt result
	require.NoError(t, dec.Decode(&wt))
	require.Equal(t, "layer-wise+write-through", wt.Mode)
	require.Less(t, wt.CopyMs, lw.CopyMs, "evictions of written-through units copy nothing")
}

func TestTable(t *testing.T) {
	cfg := defaults()
	cfg.sessions, cfg.turns = 2, 2
	var out bytes.Buffer
	require.NoError(t, run(&out, cfg, false))
	require.Contains(t, out.String(), "layer-wise onboarding: mean TTFT")
}

// The defaults (the README's command) onboard histories of more than a
// step's units, so a turn's transfers can all end before Readiness has
// applied their moves: the server must keep calling it while Completed
// signals (it used to stop with "waits on transfers that never run").
func TestDefaultsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's workload; skipped with -short")
	}
	var out bytes.Buffer
	require.NoError(t, run(&out, defaults(), false))
	require.Contains(t, out.String(), "layer-wise onboarding: mean TTFT")
}
