package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRouterViewMatchesEveryStep runs the example over real ZMQ sockets
// on loopback, in both wire layouts and hash encodings and both routings,
// and reads its JSON lines: one check per step and server, every one a
// match, the router's prediction of the reused tokens a lower bound and
// nearly always exact, and prefix routing reusing more than round robin.
func TestRouterViewMatchesEveryStep(t *testing.T) {
	const steps = 150
	reused := map[string]float64{}
	for _, args := range [][]string{
		{"-encoding", "positional", "-hashes", "int", "-route", "prefix"},
		{"-encoding", "map", "-hashes", "bytes", "-route", "prefix"},
		{"-encoding", "positional", "-hashes", "bytes", "-route", "roundrobin"},
	} {
		var out bytes.Buffer
		require.NoError(t, run(t.Context(), append(args, "-steps", "150", "-seed", "3"), &out), strings.Join(args, " "))
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		require.Len(t, lines, 2*steps+1)
		media := map[string]bool{}
		for i, line := range lines[:2*steps] {
			var c check
			require.NoError(t, json.Unmarshal([]byte(line), &c))
			require.Equal(t, i/2, c.Step)
			require.True(t, c.Match, "line %d: %s", i, line)
			// A server may reuse more than the prefix the router sees (a
			// block behind a dropped one is loaded while the dropped one
			// is recomputed), never less: nothing here prices a load
			// above a recompute.
			require.LessOrEqual(t, c.Predicted, c.Reused, "line %d: %s", i, line)
			for m := range c.Blocks {
				media[m] = true
			}
		}
		require.Equal(t, map[string]bool{"GPU": true, "CPU": true, "DISK": true}, media, "every medium is seen")
		var s summary
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &s))
		require.True(t, s.Summary)
		require.Equal(t, 2*steps, s.Checks)
		require.Equal(t, s.Checks, s.Matched)
		require.Equal(t, steps, s.Requests)
		require.Greater(t, s.Exact, steps*9/10)
		require.Positive(t, s.Events)
		require.Positive(t, s.WireBytes)
		reused[args[5]] = s.ReusedFrac
	}
	require.Greater(t, reused["prefix"], reused["roundrobin"])
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-encoding", "json"}, {"-hashes", "hex"}, {"-route", "random"}, {"-steps", "0"}} {
		require.Error(t, run(t.Context(), args, &bytes.Buffer{}), strings.Join(args, " "))
	}
}
