package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/require"
)

// The scrape this example's README quotes is what `-once -addr
// 127.0.0.1:0` prints today (the workload is deterministic; only the free
// port differs from run to run), so the README cannot go stale.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() {
		t.Skip("checks the README's excerpt; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does)")
	}
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-once", "-addr", "127.0.0.1:0"}, &out))
	require.NoError(t, published.Check("README.md", "The output of the last command:", out.String(), published.Options{
		Mask: []*regexp.Regexp{regexp.MustCompile(`^serving http://127\.0\.0\.1:\d+/metrics$`)},
	}))
}
