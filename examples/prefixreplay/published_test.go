package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/require"
)

// The whole default-run output that RESULTS.md and this example's README
// quote (the trace line, the bound, every column of the table but the
// time, and the sentences after it) is what `go run ./examples/prefixreplay`
// prints today. TestPublishedTableIsCurrent checks the table's counts on
// every run; this checks the rest of the excerpt, the program run as
// written from the repository root.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() || raceEnabled {
		t.Skip("replays the whole trace 16 times; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does, without -race)")
	}
	t.Chdir(filepath.Join("..", ".."))
	if _, err := os.Stat(defaultTrace); err != nil {
		t.Skipf("Mooncake trace not found at %s (the shared traces folder is absent)", defaultTrace)
	}
	var out bytes.Buffer
	require.NoError(t, runTo(nil, &out, io.Discard))
	opts := published.Options{Mask: []*regexp.Regexp{
		regexp.MustCompile(` +[0-9.]+s$`),      // a setting's time column
		regexp.MustCompile(` +time$`),          // its header, as wide as the longest time
		regexp.MustCompile(`^time: [0-9.]+s `), // the whole run's
	}}
	for _, e := range []struct{ doc, anchor string }{
		{"RESULTS.md", "$ go run ./examples/prefixreplay"},
		{"examples/prefixreplay/README.md", "## Sample output (default run"},
	} {
		require.NoError(t, published.Check(e.doc, e.anchor, out.String(), opts))
	}
}
