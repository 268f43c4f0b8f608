package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/require"
)

// The quickstart output that README.md and this example's README quote is
// what the program prints today (it is deterministic), so the documents
// cannot go stale.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() {
		t.Skip("checks the documents' excerpts; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does)")
	}
	var out bytes.Buffer
	require.NoError(t, run(&out))
	for _, e := range []struct{ doc, anchor string }{
		{filepath.Join("..", "..", "README.md"), "`go run ./examples/quickstart` (four requests"},
		{"README.md", "Requests a, b and d share a 2-block system prompt"},
	} {
		require.NoError(t, published.Check(e.doc, e.anchor, out.String(), published.Options{}))
	}
}
