package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/require"
)

// The bsasim output that README.md, RESULTS.md and this example's README
// quote (the claim block, the whole table and the two other selectors'
// excerpts) is what the program prints today (the simulation is
// deterministic), so the documents cannot go stale. Each excerpt is found
// by its command or the sentence that names it (package published).
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() || raceEnabled {
		t.Skip("runs the whole simulation three times (10-30 s each on 2 cores); set KVTIER_CHECK_PUBLISHED=1 to run it (CI does, without -race)")
	}
	root := filepath.Join("..", "..")
	for _, c := range []struct {
		args    []string
		excerpt []struct{ doc, anchor string }
	}{
		{nil, []struct{ doc, anchor string }{
			{"README.md", "`go run ./examples/bsasim` (10.1 s wall"},
			{"RESULTS.md", "$ go run ./examples/bsasim"},
			{"examples/bsasim/README.md", "## Sample output (`go run ./examples/bsasim`, abridged"},
		}},
		{[]string{"-selector", "sticky"}, []struct{ doc, anchor string }{
			{"RESULTS.md", "$ go run ./examples/bsasim -selector sticky"},
		}},
		{[]string{"-selector", "sink"}, []struct{ doc, anchor string }{
			{"RESULTS.md", "$ go run ./examples/bsasim -selector sink"},
		}},
	} {
		t.Run(strings.Join(append([]string{"bsasim"}, c.args...), " "), func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, run(c.args, &out, io.Discard))
			for _, e := range c.excerpt {
				require.NoError(t, published.Check(filepath.Join(root, e.doc), e.anchor, out.String(), published.Options{}))
			}
		})
	}
}
