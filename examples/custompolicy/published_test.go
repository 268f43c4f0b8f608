package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/require"
)

// The custompolicy tables that README.md, RESULTS.md and this example's
// README quote are what their commands print today (the replays are
// deterministic; only the time line depends on the machine), so the
// documents cannot go stale. The commands run as written, from the
// repository root, where the default trace is ../shared/traces.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() {
		t.Skip("checks the documents' excerpts; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does)")
	}
	t.Chdir(filepath.Join("..", ".."))
	opts := published.Options{Mask: []*regexp.Regexp{regexp.MustCompile(`^time: [0-9.]+s `)}}
	type excerpt struct{ doc, anchor string }
	for _, c := range []struct {
		args     []string
		trace    bool      // reads the default trace
		excerpts []excerpt // nil: RESULTS.md's, after the command
	}{
		{nil, true, []excerpt{
			{"RESULTS.md", "$ go run ./examples/custompolicy"},
			{"README.md", "`go run ./examples/custompolicy` (a user-written O(1) LFU"},
			{"examples/custompolicy/README.md", "## Sample output (`go run ./examples/custompolicy`,"},
		}},
		{[]string{"-sizes", "128MiB,256MiB,384MiB,512MiB,640MiB,768MiB,896MiB,1024MiB"}, true, nil},
		{[]string{"-zipf"}, false, nil},
	} {
		command := strings.Join(append([]string{"go run ./examples/custompolicy"}, c.args...), " ")
		name := strings.Join(c.args, " ")
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(defaultTrace); c.trace && err != nil {
				t.Skipf("the cloudPhysicsIO trace is not at %s (%v): skipping; it lives in ../shared/traces beside the project", defaultTrace, err)
			}
			var out bytes.Buffer
			require.NoError(t, runTo(c.args, &out, &bytes.Buffer{}))
			excerpts := c.excerpts
			if excerpts == nil {
				excerpts = []excerpt{{"RESULTS.md", "$ " + command}}
			}
			for _, e := range excerpts {
				require.NoError(t, published.Check(e.doc, e.anchor, out.String(), opts))
			}
		})
	}
}
