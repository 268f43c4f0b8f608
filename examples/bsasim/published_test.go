package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// publishedExcerpt returns the block of `go run ./examples/bsasim` output
// pasted in the markdown file at path: the fenced lines from "claim vs
// measured" to the end of the fence.
func publishedExcerpt(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	text := string(data)
	start := strings.Index(text, "claim vs measured (")
	require.NotEqual(t, -1, start, "%s has no bsasim claim block", path)
	end := strings.Index(text[start:], "```")
	require.NotEqual(t, -1, end, "%s: the claim block's fence does not close", path)
	return text[start : start+end]
}

// The claim block and the table of MiB onboarded that README.md, RESULTS.md
// and this example's README quote are what the default run prints today
// (the simulation is deterministic), so the documents cannot go stale.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if os.Getenv("KVTIER_CHECK_PUBLISHED") == "" || raceEnabled {
		t.Skip("runs the whole default simulation (about a minute); set KVTIER_CHECK_PUBLISHED=1 to run it (CI does, without -race)")
	}
	var out bytes.Buffer
	require.NoError(t, run(nil, &out, io.Discard))
	for _, path := range []string{
		filepath.Join("..", "..", "README.md"),
		filepath.Join("..", "..", "RESULTS.md"),
		"README.md",
	} {
		excerpt := publishedExcerpt(t, path)
		require.Contains(t, out.String(), excerpt, "%s quotes a claim block the default run no longer prints", path)
	}
}
