package kvcache_test

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

// conversationTrace reads the first limit requests (0: all) of the public
// Mooncake conversation trace (TRACES.md) as prompts, and each request's
// block ids. The trace names 512-token blocks by id: each id's tokens are
// made from the id (its first token is the id, so different ids never
// agree), and a prompt is its blocks' tokens cut at input_length. It skips
// t when the shared traces folder is absent.
func conversationTrace(t *testing.T, limit int) (prompts [][]uint32, ids [][]uint64) {
	t.Helper()
	path := filepath.Join("..", "..", "shared", "traces", "mooncake_conversation.jsonl")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("Mooncake trace not found at %s (the shared traces folder is absent)", path)
	}
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() && (limit == 0 || len(prompts) < limit) {
		var r struct {
			InputLength int      `json:"input_length"`
			HashIDs     []uint64 `json:"hash_ids"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		p := make([]uint32, 0, len(r.HashIDs)*512)
		for _, id := range r.HashIDs {
			x := id*0x9e3779b97f4a7c15 + 1
			p = append(p, uint32(id))
			for range 511 {
				x = x*6364136223846793005 + 1442695040888963407
				p = append(p, uint32(x>>33))
			}
		}
		prompts = append(prompts, p[:min(len(p), r.InputLength)])
		ids = append(ids, r.HashIDs)
	}
	require.NoError(t, sc.Err())
	return prompts, ids
}
