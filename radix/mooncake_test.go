package radix

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// mooncakeTrace is the Mooncake conversation trace, relative to this
// package's directory (TRACES.md at the repository's root says where it
// comes from).
var mooncakeTrace = filepath.Join("..", "..", "shared", "traces", "mooncake_conversation.jsonl")

type mooncakeRequest struct {
	Timestamp   int64    `json:"timestamp"`
	InputLength int      `json:"input_length"`
	HashIDs     []uint64 `json:"hash_ids"`
}

// readMooncake streams the trace, calling fn per request in file order. It
// skips the test when the trace folder is absent (a fresh clone).
func readMooncake(t *testing.T, fn func(mooncakeRequest)) {
	t.Helper()
	f, err := os.Open(mooncakeTrace)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("Mooncake trace not found at %s (the shared traces folder is absent)", mooncakeTrace)
	}
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		var r mooncakeRequest
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "line %d", line)
		fn(r)
	}
	require.NoError(t, sc.Err())
}

// idTokens encodes each Mooncake block id as a 2-token block: the ids are
// already chained hashes of 512-token blocks, so an id stands for its block
// and everything before it.
func idTokens(dst []uint32, ids []uint64) []uint32 {
	for _, id := range ids {
		dst = append(dst, uint32(id), uint32(id>>32))
	}
	return dst
}

// TestMooncakeReusableFraction replays the Mooncake conversation trace into
// an unlimited tree, in file order, and counts the blocks already cached
// when each request arrives. A plain set of ids gives the same count
// directly; the two must agree. The Mooncake paper reports about 40%.
func TestMooncakeReusableFraction(t *testing.T) {
	tr, err := NewTree[struct{}](2, 0)
	require.NoError(t, err)
	seen := map[uint64]bool{}
	var (
		requests, blocks, treeHits, mapHits int
		inputTokens, hitTokens              int
		tokens                              []uint32
		dst                                 []*Node[struct{}]
	)
	readMooncake(t, func(r mooncakeRequest) {
		requests++
		blocks += len(r.HashIDs)
		tokens = idTokens(tokens[:0], r.HashIDs)
		dst, err = tr.Match(dst[:0], Keys{}, tokens, nil)
		require.NoError(t, err)
		treeHits += len(dst)
		inputTokens += r.InputLength
		hitTokens += min(512*len(dst), r.InputLength)
		for _, id := range r.HashIDs {
			if seen[id] {
				mapHits++
			}
		}
		for _, id := range r.HashIDs {
			seen[id] = true
		}
		_, _, err = tr.Insert(dst[:0], Keys{}, tokens, nil)
		require.NoError(t, err)
	})
	require.Equal(t, 12031, requests)
	require.Equal(t, mapHits, treeHits, "longest-prefix matches equal the direct count of seen ids")
	require.Equal(t, len(seen), tr.Len(), "one node per distinct block id")
	frac := float64(treeHits) / float64(blocks)
	t.Logf("Mooncake conversation: %d requests, %d blocks, %d reusable: %.2f%% of blocks (paper: about 40%%); "+
		"%.2f%% of %d input tokens; %d distinct blocks",
		requests, blocks, treeHits, 100*frac, 100*float64(hitTokens)/float64(inputTokens), inputTokens, tr.Len())
	require.Greater(t, frac, 0.0)
	require.Less(t, frac, 1.0)
}
