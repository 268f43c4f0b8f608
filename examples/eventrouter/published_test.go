package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/require"
)

// The lines this example's README quotes from the default run, and the
// round-robin run's reused fraction it quotes in a sentence, are what the
// program prints today (the workload and the routing are deterministic),
// so the README cannot go stale.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() {
		t.Skip("checks the README's excerpts; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does)")
	}
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), nil, &out))
	require.NoError(t, published.Check("README.md", "The first and last lines of the first command", out.String(), published.Options{}))

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	quoted := regexp.MustCompile("`-route roundrobin`, summary line: `([^`]+)`").FindSubmatch(readme)
	require.NotNil(t, quoted, "README.md no longer quotes the round-robin summary")
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"-route", "roundrobin"}, &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	summary := lines[len(lines)-1]
	require.Contains(t, summary, string(quoted[1]), "README.md quotes a round-robin summary the run no longer prints")
}
