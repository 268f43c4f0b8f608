package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table this example's README quotes is what the default run prints
// today (time is simulated, so the run is deterministic), so the README
// cannot go stale, nor can the stall ARCHITECTURE.md quotes from it.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() {
		t.Skip("checks the README's excerpt; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does)")
	}
	var out bytes.Buffer
	require.NoError(t, run(&out, defaults(), false))
	require.NoError(t, published.Check("README.md", "(`go run ./examples/overlap`, defaults)", out.String(), published.Options{}))

	// ARCHITECTURE.md quotes the layer-wise stall in a sentence.
	arch, err := os.ReadFile(filepath.Join("..", "..", "ARCHITECTURE.md"))
	require.NoError(t, err)
	quoted := regexp.MustCompile(`layer-wise\s+prefill\s+stalls\s+([0-9.]+)\s+ms`).FindSubmatch(arch)
	require.NotNil(t, quoted, "ARCHITECTURE.md no longer quotes the layer-wise stall")
	// mode, turns, mean TTFT, p50, p99, copy, stall
	row := regexp.MustCompile(`(?m)^\s+layer-wise(?:\s+[0-9.]+){5}\s+([0-9.]+)\s`).FindStringSubmatch(out.String())
	require.NotNil(t, row, "no layer-wise row in the output")
	assert.Equal(t, row[1], string(quoted[1]), "ARCHITECTURE.md: the layer-wise stall")
}
