package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	serving = regexp.MustCompile(`^serving (http://127\.0\.0\.1:(\d+)/metrics)$`)
	sample  = regexp.MustCompile(`^(kvtier_[a-z_]+)\{([^}]*)\} (\S+)$`)
)

// samples parses the kvtier_ lines of out: the value of each sample by
// name and labels.
func samples(t *testing.T, out string) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		if !strings.HasPrefix(line, "kvtier_") {
			continue
		}
		m := sample.FindStringSubmatch(line)
		require.NotNil(t, m, line)
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, line)
		got[m[1]+"{"+m[2]+"}"] = v
	}
	return got
}

func TestOnce(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"-once", "-addr", "127.0.0.1:0", "-requests", "200"}, &out))
	first, _, _ := strings.Cut(out.String(), "\n")
	m := serving.FindStringSubmatch(first)
	require.NotNil(t, m, "first line %q prints the address", first)
	assert.NotEqual(t, "0", m[2], "the actual port, not 0")

	got := samples(t, out.String())
	for _, name := range []string{
		"kvtier_offloads_total", "kvtier_onboards_total", "kvtier_moved_bytes_total",
		"kvtier_blocks", "kvtier_blocks_stored_total", "kvtier_sequences", "kvtier_metadata_bytes",
		"kvtier_events_buffered", "kvtier_events_dropped_total",
	} {
		assert.Contains(t, got, name+`{model="toy"}`)
	}
	for _, tier := range []string{"GPU", "CPU"} {
		for _, name := range []string{
			"hits_total", "misses_total", "evictions_total", "moved_in_total",
			"capacity_slots", "free_slots", "pinned_slots", "cached_slots", "capacity_bytes",
		} {
			assert.Contains(t, got, "kvtier_tier_"+name+`{model="toy",tier="`+tier+`"}`)
		}
	}
	assert.Positive(t, got[`kvtier_tier_hits_total{model="toy",tier="GPU"}`], "shared prefixes hit on the GPU")
	assert.Positive(t, got[`kvtier_tier_hits_total{model="toy",tier="CPU"}`], "offloaded histories hit on the CPU")
	assert.Positive(t, got[`kvtier_offloads_total{model="toy"}`])
	assert.Positive(t, got[`kvtier_onboards_total{model="toy"}`])
	assert.Equal(t, float64(maxLive), got[`kvtier_sequences{model="toy"}`])
	assert.Equal(t, 256.0, got[`kvtier_tier_capacity_slots{model="toy",tier="GPU"}`])
}

// TestServe runs the command until its context is cancelled and scrapes it
// in between, as Prometheus would.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"-addr", "127.0.0.1:0", "-requests", "50"}, w)
		w.CloseWithError(err)
		done <- err
	}()
	lines := bufio.NewScanner(r)
	require.True(t, lines.Scan(), "the address is printed")
	m := serving.FindStringSubmatch(lines.Text())
	require.NotNil(t, m, lines.Text())
	go func() { _, _ = io.Copy(io.Discard, r) }() // nothing else is printed, but never block run

	resp, err := http.Get(m[1])
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "# TYPE kvtier_tier_hits_total counter")
	assert.Contains(t, samples(t, string(body)), `kvtier_tier_capacity_slots{model="toy",tier="GPU"}`)

	cancel()
	require.NoError(t, <-done)
}

func TestBadFlags(t *testing.T) {
	assert.Error(t, run(t.Context(), []string{"-requests", "0", "-addr", "127.0.0.1:0"}, io.Discard))
	assert.Error(t, run(t.Context(), []string{"-nope"}, io.Discard))
}
