package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// runLines runs soak with args and returns its lines, by policy.
func runLines(t *testing.T, args ...string) map[string][]line {
	t.Helper()
	var out, errs bytes.Buffer
	require.NoError(t, run(args, &out, &errs), errs.String())
	lines := map[string][]line{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l line
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		lines[l.Policy] = append(lines[l.Policy], l)
	}
	return lines
}

// TestHeapStaysFlat is the soak's claim at a scale a test affords: with the
// default budget, under every policy, the tree stops growing and the heap
// at the end is within 10% of the heap after the first third of the run.
// Without a budget, tails kept by priority hold a prompt's depth of dropped
// blocks each.
func TestHeapStaysFlat(t *testing.T) {
	args := []string{"-requests", "3000", "-every", "1000", "-prompt", "512", "-gpu-blocks", "256"}
	lines := runLines(t, args...)
	require.Len(t, lines, len(policyNames))
	for _, p := range policyNames {
		ls := lines[p]
		require.Len(t, ls, 3, p)
		first, last := ls[0], ls[len(ls)-1]
		require.Equal(t, 3000, last.Requests)
		require.LessOrEqual(t, last.TreeBlocks, 1024, "%s: the default budget (1024 blocks here)", p)
		require.InEpsilon(t, float64(first.HeapInuseBytes), float64(last.HeapInuseBytes), 0.10, "%s: heap", p)
		require.Equal(t, first.TreeBlocks, last.TreeBlocks, "%s: the tree stopped growing", p)
	}
	require.Positive(t, lines["plru-tail"][2].PrunedBlocks)

	unbounded := runLines(t, append(args, "-policies", "plru-tail", "-max-blocks", "-1")...)["plru-tail"]
	require.Greater(t, unbounded[2].TreeBlocks, 5*lines["plru-tail"][2].TreeBlocks,
		"without a budget the tree holds about a prompt's depth per cached tail")
	require.Greater(t, unbounded[2].HeapInuseBytes, 2*lines["plru-tail"][2].HeapInuseBytes)
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-requests", "0"}, {"-every", "-1"}, {"-policies", "lru,nope"}, {"-max-blocks", "-2"}, {"extra"},
	} {
		var out, errs bytes.Buffer
		require.Error(t, run(args, &out, &errs), "%v", args)
	}
}
