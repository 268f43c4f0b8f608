package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cloudPhysics is the shared trace, relative to this package's directory.
var cloudPhysics = filepath.Join("..", "..", "..", "shared", "traces", "cloudPhysicsIO.oracleGeneral.bin")

func runRows(t *testing.T, args ...string) []row {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(append(args, "-json"), &out))
	var rows []row
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r row
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		rows = append(rows, r)
	}
	return rows
}

// The shipped policies, driven the way this example drives its own, give
// libCacheSim's published miss counts (TRACES.md at the repository's
// root), so the comparison table is wired right.
func TestShippedPoliciesMatchLibCacheSim(t *testing.T) {
	if _, err := os.Stat(cloudPhysics); err != nil {
		t.Skipf("cloudPhysicsIO trace not found at %s (the shared traces folder is absent)", cloudPhysics)
	}
	rows := runRows(t, "-trace", cloudPhysics, "-policy", "lru,fifo,s3fifo",
		"-sizes", "128MiB,512MiB,1024MiB")
	want := map[string][]int64{ // columns 128, 512 and 1024 MiB of the published table
		"lru":    {93374, 81722, 71704},
		"fifo":   {93403, 84025, 72140},
		"s3fifo": {90117, 72191, 56045},
	}
	got := map[string][]int64{}
	for _, r := range rows {
		assert.Equal(t, int64(113872), r.Requests)
		assert.Equal(t, "bytes", r.Unit)
		got[r.Policy] = append(got[r.Policy], r.Misses)
	}
	assert.Equal(t, want, got)
}

// On a Zipf trace (independent references, fixed popularity) counting uses
// pays: LFU misses less than LRU at every size, and every policy misses
// less in a larger cache.
func TestZipfComparison(t *testing.T) {
	rows := runRows(t, "-zipf", "-zipf-requests", "40000", "-zipf-objects", "4000", "-sizes", "2%,5%,10%,20%,40%")
	require.Len(t, rows, 4*5)
	by := map[string][]row{}
	for _, r := range rows {
		assert.Equal(t, "objects", r.Unit)
		assert.Equal(t, int64(40000), r.Requests)
		assert.InDelta(t, float64(r.Misses)/float64(r.Requests), r.MissRatio, 1e-12)
		by[r.Policy] = append(by[r.Policy], r)
	}
	require.Equal(t, []string{"fifo", "lfu", "lru", "s3fifo"}, slices.Sorted(func(yield func(string) bool) {
		for k := range by {
			if !yield(k) {
				return
			}
		}
	}))
	for p, rs := range by {
		for i := 1; i < len(rs); i++ {
			assert.Less(t, rs[i].Misses, rs[i-1].Misses, "%s: size %d vs %d", p, rs[i].CacheSize, rs[i-1].CacheSize)
		}
	}
	for i := range by["lfu"] {
		assert.Less(t, by["lfu"][i].Misses, by["lru"][i].Misses, "size %d", by["lfu"][i].CacheSize)
	}
}

// Without -trace and without the shared folder (the test runs in this
// package's directory, where ../shared/traces does not exist), the program
// falls back to the Zipf trace and says so on stderr; the text output and
// the SVG have what they promise.
func TestFallbackTextAndSVG(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "miss.svg")
	var out, errOut bytes.Buffer
	require.NoError(t, runTo([]string{"-zipf-requests", "20000", "-zipf-objects", "2000", "-svg", svg}, &out, &errOut))
	assert.Equal(t, "custompolicy: no trace at "+defaultTrace+" (libCacheSim's cloudPhysicsIO trace; TRACES.md at the repository's root says how to get it): replaying a generated Zipf trace instead\n", errOut.String())
	s := out.String()
	assert.Contains(t, s, "trace zipf(alpha=0.9, 2000 objects, seed 1): 20000 requests")
	assert.Regexp(t, `(?m)^\s+cache size\s+lfu\s+lru\s+fifo\s+s3fifo$`, s)
	assert.Len(t, regexp.MustCompile(`(?m)^\s+\d+% .*\d\*`).FindAllString(s, -1), 6, "a best marked on each size's line")
	assert.Contains(t, s, "lfu vs s3fifo: fewer misses at ")
	plot, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(plot, []byte("<svg ")))
	assert.Equal(t, 4, bytes.Count(plot, []byte("<polyline")))
}

// The Zipf trace is a function of its seed.
func TestZipfSeed(t *testing.T) {
	a, err := zipfTrace(1, 1000, 100, 1.1)
	require.NoError(t, err)
	b, err := zipfTrace(1, 1000, 100, 1.1)
	require.NoError(t, err)
	c, err := zipfTrace(2, 1000, 100, 1.1)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, c)
	for _, bad := range [][3]float64{{0, 10, 1}, {10, 0, 1}, {10, 10, 0}, {10, 10, -1}} {
		_, err := zipfTrace(1, int(bad[0]), int(bad[1]), bad[2])
		assert.ErrorIs(t, err, errZipf, "%v", bad)
	}
}

func TestBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-policy", "arc"},
		{"-sizes", "0%"},
		{"-sizes", "101%"},
		{"-sizes", "12XB"},
		{"-sizes", "0"},
		{"-zipf", "extra"},
		{"-trace", "trace.csv"},
	} {
		err := run(args, &bytes.Buffer{})
		assert.ErrorIs(t, err, errUsage, "%q", args)
	}
	err := run([]string{"-trace", filepath.Join(t.TempDir(), "missing.bin")}, &bytes.Buffer{})
	assert.ErrorIs(t, err, os.ErrNotExist, "a named trace must exist: no silent fallback")
	err = run([]string{"-zipf", "-zipf-alpha", "0"}, &bytes.Buffer{})
	assert.ErrorIs(t, err, errZipf)
}

func TestParseSizes(t *testing.T) {
	l, err := parseSizes("5%, 128MiB,1GB,4096")
	require.NoError(t, err)
	got, err := l.resolve(1000)
	require.NoError(t, err)
	assert.Equal(t, []cacheSize{{50, "5%"}, {128 << 20, "128MiB"}, {1e9, "1GB"}, {4096, "4096"}}, got)
}
