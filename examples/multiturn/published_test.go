package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/internal/published"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The multiturn output that README.md, RESULTS.md, ARCHITECTURE.md and this
// example's README quote (the default run; the -decide-weights seed run's
// two rows RESULTS.md gives in a sentence; the -sweep run, and the mean
// TTFTs the README's table takes from it) is what the program prints today
// (the workload and the simulation are deterministic), so the documents
// cannot go stale.
func TestPublishedExcerptIsCurrent(t *testing.T) {
	if !published.Enabled() || raceEnabled {
		t.Skip("runs the default simulation twice and a 4-size sweep; set KVTIER_CHECK_PUBLISHED=1 to run it (CI does, without -race)")
	}
	root := filepath.Join("..", "..")
	t.Run("default", func(t *testing.T) {
		var out bytes.Buffer
		require.NoError(t, run(nil, &out, io.Discard))
		for _, e := range []struct{ doc, anchor string }{
			{filepath.Join(root, "RESULTS.md"), "`go run ./examples/multiturn` (shared 2-core machine):"},
			{filepath.Join(root, "README.md"), "`go run ./examples/multiturn` (Llama-2-13B, 24 GiB GPU"},
			{"README.md", "## Sample (default settings, `go run ./examples/multiturn`,"},
		} {
			require.NoError(t, published.Check(e.doc, e.anchor, out.String(), published.Options{}))
		}
		// ARCHITECTURE.md quotes LRU's recomputed tokens in a sentence.
		arch, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
		require.NoError(t, err)
		quoted := regexp.MustCompile(`LRU\s+recomputes\s+([0-9,]+)\s+tokens`).FindSubmatch(arch)
		require.NotNil(t, quoted, "ARCHITECTURE.md no longer quotes LRU's recomputed tokens")
		recomputed, _ := policyRow(t, out.String(), "lru")
		assert.Equal(t, recomputed, strings.ReplaceAll(string(quoted[1]), ",", ""), "ARCHITECTURE.md: LRU's recomputed tokens")
	})
	t.Run("-decide-weights seed", func(t *testing.T) {
		// RESULTS.md quotes two rows of it in a sentence: lru's and
		// retention-seed's recomputed tokens and mean TTFT.
		results, err := os.ReadFile(filepath.Join(root, "RESULTS.md"))
		require.NoError(t, err)
		quoted := regexp.MustCompile("`go run ./examples/multiturn -decide-weights seed`[^:]*:" +
			`\s+lru\s+([0-9,]+)\s+recomputed\s+tokens\s+and\s+([0-9.]+)\s+ms\s+mean\s+TTFT\s+\([^)]*\),` +
			`\s+retention-seed\s+([0-9,]+)\s+and\s+([0-9.]+)\s+ms`).FindSubmatch(results)
		require.NotNil(t, quoted, "RESULTS.md no longer quotes the -decide-weights seed run as this test reads it")
		var out bytes.Buffer
		require.NoError(t, run([]string{"-decide-weights", "seed"}, &out, io.Discard))
		for i, policy := range []string{"lru", "retention-seed"} {
			recomputed, ttft := policyRow(t, out.String(), policy)
			assert.Equal(t, recomputed, strings.ReplaceAll(string(quoted[1+2*i]), ",", ""), "RESULTS.md: %s's recomputed tokens", policy)
			assert.Equal(t, ttft, string(quoted[2+2*i]), "RESULTS.md: %s's mean TTFT", policy)
		}
	})
	t.Run("-sweep 12,24,48,96", func(t *testing.T) {
		// The plot (-svg) does not change what is printed.
		var out bytes.Buffer
		require.NoError(t, run([]string{"-sweep", "12,24,48,96"}, &out, io.Discard))
		// RESULTS.md leaves out the per-policy "vs lru" lines, and says so.
		require.NoError(t, published.Check(filepath.Join(root, "RESULTS.md"),
			"`go run ./examples/multiturn -sweep 12,24,48,96 -svg examples/multiturn/ttft_sweep.svg`",
			out.String(), published.Options{Omit: []*regexp.Regexp{regexp.MustCompile(`^\S+ vs lru: `)}}))
		// The README's table of mean TTFTs, one row per GPU size.
		readme, err := os.ReadFile("README.md")
		require.NoError(t, err)
		for _, row := range sweepTTFTRows(t, out.String()) {
			assert.Contains(t, string(readme), row, "README.md's -sweep table")
		}
	})
}

// sweepTTFTRows returns the README's mean-TTFT table rows ("| GiB | lru's
// | prio-lru's | ... |") as a -sweep output gives them: one per GPU size,
// the policies in the output's order.
func sweepTTFTRows(t *testing.T, out string) []string {
	t.Helper()
	gpu := regexp.MustCompile(`^GPU (\S+) GiB `)
	// policy, turns, hit %, recomputed, offloads, onboards, drops, GiB
	// moved, TTFT mean ms, p50 ms, p99 ms
	policyRow := regexp.MustCompile(`^\s*[a-z0-9-]+(\s+[0-9.]+){10}\s*$`)
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case gpu.MatchString(l):
			rows = append(rows, []string{gpu.FindStringSubmatch(l)[1]})
		case policyRow.MatchString(l):
			require.NotEmpty(t, rows, "a policy row before the first GPU size: %q", l)
			rows[len(rows)-1] = append(rows[len(rows)-1], strings.Fields(l)[8])
		}
	}
	require.Len(t, rows, 4, "GPU sizes in the sweep")
	var md []string
	for _, r := range rows {
		require.Len(t, r, 6, "%v: a size and 5 policies", r)
		md = append(md, "| "+strings.Join(r, " | ")+" |")
	}
	return md
}

// policyRow returns the recomputed tokens and the mean TTFT of the policy's
// row in the first table of out.
func policyRow(t *testing.T, out, policy string) (recomputed, ttftMean string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		// policy, turns, hit %, recomputed, offloads, onboards, drops,
		// GiB moved, TTFT mean ms, p50 ms, p99 ms
		if f := strings.Fields(l); len(f) == 11 && f[0] == policy {
			return f[3], f[8]
		}
	}
	require.Failf(t, "no row", "no %s row in the output", policy)
	return "", ""
}
