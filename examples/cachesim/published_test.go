package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/require"
)

// The cachesim lines README.md quotes are what its command prints today on
// libCacheSim's cloudPhysicsIO trace (the replay is deterministic), so the
// README cannot go stale. The command runs as written, from the repository
// root.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() {
		t.Skip("checks README.md's excerpt; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does)")
	}
	t.Chdir(filepath.Join("..", ".."))
	args := []string{"../shared/traces/cloudPhysicsIO.oracleGeneral.bin", "oracleGeneral", "lru,s3fifo", "128MiB,1GiB"}
	if _, err := os.Stat(args[0]); err != nil {
		t.Skipf("libCacheSim's cloudPhysicsIO trace is not at %s (%v): skipping; it lives in ../shared/traces beside the project", args[0], err)
	}
	var out, errOut bytes.Buffer
	require.NoError(t, run(args, &out, &errOut), "stderr: %s", errOut.String())
	anchor := "`go run ./examples/cachesim " + strings.Join(args, " ") + "`"
	require.NoError(t, published.Check("README.md", anchor, out.String(), published.Options{}))
}
