package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
)

// genTrace returns a small trace with Zipf keys and per-object sizes of 1
// to 64 KiB, timestamps a few requests apart.
func genTrace(n int, seed uint64) []trace.Request {
	rng := rand.New(rand.NewPCG(seed, 3))
	zipf := rand.NewZipf(rng, 1.1, 2, 2000)
	sizes := map[uint64]int64{}
	out := make([]trace.Request, n)
	for i := range out {
		id := zipf.Uint64() + 1
		if _, ok := sizes[id]; !ok {
			sizes[id] = 1 + rng.Int64N(64<<10)
		}
		out[i] = trace.Request{Time: int64(i / 3), ID: id, Size: sizes[id], NextAccess: -1}
	}
	return out
}

// writeTraces writes reqs as oracleGeneral, txt and csv files in dir.
func writeTraces(t *testing.T, dir string, reqs []trace.Request) (bin, txt, csv string) {
	t.Helper()
	bin, txt, csv = filepath.Join(dir, "gen.bin"), filepath.Join(dir, "gen.txt"), filepath.Join(dir, "gen.csv")
	var b, tx, c bytes.Buffer
	w := trace.NewOracleGeneralWriter(&b)
	c.WriteString("size;time;id\n")
	for _, q := range reqs {
		require.NoError(t, w.Write(q))
		fmt.Fprintf(&tx, "%d\n", q.ID)
		fmt.Fprintf(&c, "%d;%d;%d\n", q.Size, q.Time, q.ID)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, os.WriteFile(bin, b.Bytes(), 0o600))
	require.NoError(t, os.WriteFile(txt, tx.Bytes(), 0o600))
	require.NoError(t, os.WriteFile(csv, c.Bytes(), 0o600))
	return bin, txt, csv
}

func runOK(t *testing.T, args ...string) []string {
	t.Helper()
	var out, errOut bytes.Buffer
	require.NoError(t, run(args, &out, &errOut), "stderr: %s", errOut.String())
	var lines []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func runJSON(t *testing.T, args ...string) []jsonResult {
	t.Helper()
	var res []jsonResult
	for _, l := range runOK(t, append(args, "-json")...) {
		var r jsonResult
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		res = append(res, r)
	}
	return res
}

// direct replays reqs through a policy built as cachesim builds it. For
// wtinylfu, whose sketch hashes the ids it sees, the replay renumbers them
// densely as cachesim's in-memory replays do; the other policies' choices
// do not depend on the ids.
func direct(t *testing.T, name string, reqs []trace.Request, cfg replay.Config) replay.Result {
	t.Helper()
	clock := new(eviction.ManualClock)
	o, err := parseArgs([]string{"x", "txt", name, "1"}, &bytes.Buffer{})
	require.NoError(t, err)
	p, err := newPolicy(o, name, cfg.Capacity, clock, nil)
	require.NoError(t, err)
	cfg.Clock = clock
	if name == "wtinylfu" {
		res, err := replay.Prepare(reqs).Run(p, cfg)
		require.NoError(t, err)
		return res
	}
	res, err := replay.RunRequests(p, reqs, cfg)
	require.NoError(t, err)
	return res
}

func TestCachesimGeneratedTrace(t *testing.T) {
	reqs := genTrace(20000, 1)
	bin, txt, csv := writeTraces(t, t.TempDir(), reqs)
	sizes := []int64{1 << 20, 8 << 20}

	// Flags before, between and after the positional arguments.
	res := runJSON(t, "-parallel", "2", bin, "oracleGeneral", strings.Join(policyNames, ","), "1MiB,8MiB", "--s3fifo-threshold", "2")
	require.Len(t, res, 2*len(policyNames))
	i := 0
	for _, name := range policyNames {
		for _, size := range sizes {
			r := res[i]
			i++
			want := direct(t, name, reqs, replay.Config{Capacity: size})
			require.Equal(t, "gen.bin", r.Trace)
			require.Equal(t, name, r.Policy)
			require.Equal(t, size, r.CacheSize)
			require.Equal(t, want.Requests, r.Requests, "%s %d", name, size)
			require.Equal(t, want.Misses, r.Misses, "%s %d", name, size)
			require.Equal(t, want.MissBytes, r.ByteMisses, "%s %d", name, size)
			require.InDelta(t, want.MissRatio(), r.MissRatio, 1e-12)
			require.InDelta(t, want.ByteMissRatio(), r.ByteMissRatio, 1e-12)
			require.GreaterOrEqual(t, r.Seconds, 0.0)
			require.Less(t, r.Misses, r.Requests, "a Zipf trace has hits")
		}
	}

	// The csv copy (columns shuffled, header, ';') and a streaming run give
	// the same counts as the binary.
	csvRes := runJSON(t, csv, "csv", "lru,s3fifo", "1MiB,8MiB", "-csv-header", "-csv-delimiter", ";",
		"-csv-id-col", "3", "-csv-time-col", "2", "-csv-size-col", "1", "-stream")
	binRes := runJSON(t, bin, "oracleGeneral", "lru,s3fifo", "1MiB,8MiB")
	for i := range binRes {
		require.Equal(t, binRes[i].Misses, csvRes[i].Misses)
		require.Equal(t, binRes[i].ByteMisses, csvRes[i].ByteMisses)
	}

	// txt has no sizes: every request has size 1, as with --ignore-obj-size
	// on the binary.
	txtRes := runJSON(t, txt, "txt", "lru,fifo,s3fifo", "100,1000")
	objRes := runJSON(t, "--ignore-obj-size", bin, "oracleGeneral", "lru,fifo,s3fifo", "100,1000")
	for i := range txtRes {
		require.Equal(t, objRes[i].Misses, txtRes[i].Misses)
		require.Equal(t, txtRes[i].Misses, txtRes[i].ByteMisses, "byte counts are request counts")
		require.Equal(t, int64(20000), txtRes[i].Requests)
	}
}

// TestRetentionIsLRUOnBlockTraces checks what the documentation says: with
// one cost for every object, retention and plru make LRU's choices, under
// virtual and trace time.
func TestRetentionIsLRUOnBlockTraces(t *testing.T) {
	reqs := genTrace(20000, 2)
	bin, _, _ := writeTraces(t, t.TempDir(), reqs)
	for _, timeFlag := range []string{"virtual", "trace"} {
		res := runJSON(t, bin, "oracleGeneral", "lru,plru,retention", "2MiB", "-time", timeFlag)
		require.Len(t, res, 3)
		require.Equal(t, res[0].Misses, res[1].Misses, "plru, -time %s", timeFlag)
		require.Equal(t, res[0].Misses, res[2].Misses, "retention, -time %s", timeFlag)
		require.Equal(t, res[0].ByteMisses, res[2].ByteMisses, "retention, -time %s", timeFlag)
	}
}

func TestCachesimTextOutput(t *testing.T) {
	reqs := genTrace(3000, 3)
	bin, _, _ := writeTraces(t, t.TempDir(), reqs)
	lines := runOK(t, bin, "oracleGeneral", "LRU,S3-FIFO", "1MiB,1500000")
	require.Len(t, lines, 4)
	want := direct(t, "lru", reqs, replay.Config{Capacity: 1 << 20})
	require.Equal(t, fmt.Sprintf("gen.bin lru cache size 1MiB, %d req, %d miss, miss ratio %.4f, byte miss ratio %.4f",
		want.Requests, want.Misses, want.MissRatio(), want.ByteMissRatio()), lines[0])
	require.True(t, strings.HasPrefix(lines[1], "gen.bin lru cache size 1500000, "), lines[1])
	require.True(t, strings.HasPrefix(lines[2], "gen.bin s3fifo cache size 1MiB, "), lines[2])
}

func TestCachesimErrors(t *testing.T) {
	dir := t.TempDir()
	bin, _, csv := writeTraces(t, dir, genTrace(100, 4))
	truncated := filepath.Join(dir, "truncated.bin")
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(truncated, data[:len(data)-5], 0o600))
	cases := map[string][]string{
		"too few arguments":   {bin, "oracleGeneral", "lru"},
		"too many arguments":  {bin, "oracleGeneral", "lru", "1MiB", "extra"},
		"unknown type":        {bin, "vscsi", "lru", "1MiB"},
		"unknown policy":      {bin, "oracleGeneral", "lru,lfu", "1MiB"},
		"bad size":            {bin, "oracleGeneral", "lru", "12XB"},
		"zero size":           {bin, "oracleGeneral", "lru", "0"},
		"negative size":       {bin, "oracleGeneral", "lru", "-5MiB"},
		"bad time source":     {bin, "oracleGeneral", "lru", "1MiB", "-time", "wall"},
		"bad parallel":        {bin, "oracleGeneral", "lru", "1MiB", "-parallel", "0"},
		"bad delimiter":       {csv, "csv", "lru", "1MiB", "-csv-delimiter", ";;"},
		"bad s3fifo ratio":    {bin, "oracleGeneral", "s3fifo", "1MiB", "-s3fifo-small-ratio", "1.5"},
		"missing file":        {bin + ".missing", "oracleGeneral", "lru", "1MiB"},
		"csv without id col":  {csv, "csv", "lru", "1MiB", "-csv-id-col", "0"},
		"csv header as data":  {csv, "csv", "lru", "1MiB", "-csv-delimiter", ";"},
		"unknown flag":        {bin, "oracleGeneral", "lru", "1MiB", "-nope"},
		"truncated binary":    {truncated, "oracleGeneral", "lru", "1MiB"},
		"streaming bad input": {csv, "csv", "lru", "1MiB", "-csv-delimiter", ";", "-stream"},
	}
	for name, args := range cases {
		var out, errOut bytes.Buffer
		err := run(args, &out, &errOut)
		require.Error(t, err, name)
		if name == "truncated binary" {
			require.ErrorIs(t, err, trace.ErrTruncated)
		}
		require.Empty(t, out.String(), name)
	}
}

// A trace missing from the shared traces folder, streamed or not, gets a
// pointer to TRACES.md; any other missing trace gets the plain error.
func TestMissingSharedTraceSaysWhereToGetIt(t *testing.T) {
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared", "traces", "cloudPhysicsIO.oracleGeneral.bin")
	for _, extra := range [][]string{nil, {"-stream"}} {
		err := run(append([]string{shared, "oracleGeneral", "lru", "1MiB"}, extra...), io.Discard, io.Discard)
		require.ErrorIs(t, err, fs.ErrNotExist, extra)
		require.Contains(t, err.Error(), "TRACES.md", extra)
	}
	err := run([]string{filepath.Join(dir, "other.bin"), "oracleGeneral", "lru", "1MiB"}, io.Discard, io.Discard)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NotContains(t, err.Error(), "TRACES.md")
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1": 1, "4096": 4096, "128MiB": 128 << 20, "1gib": 1 << 30, "2KiB": 2048, "1TiB": 1 << 40,
		"1KB": 1000, "3MB": 3e6, "2GB": 2e9, "0.5GiB": 1 << 29, " 7 MiB ": 7 << 20, "100B": 100,
	} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "x", "0", "0.4", "-1", "1e30GiB", "NaN", "Inf", "1.5.5MB"} {
		_, err := parseSize(in)
		require.ErrorIs(t, err, errUsage, in)
	}
	require.Equal(t, "128MiB", formatSize(128<<20, false))
	require.Equal(t, "1GiB", formatSize(1<<30, false))
	require.Equal(t, "1500000", formatSize(1500000, false))
	require.Equal(t, "1048576", formatSize(1<<20, true))
}

// TestCachesimCloudPhysics runs the command on libCacheSim's trace when the
// shared folder is present: LRU, FIFO, S3-FIFO and ARC print libCacheSim's
// published miss counts.
func TestCachesimCloudPhysics(t *testing.T) {
	path := filepath.Join("..", "..", "..", "shared", "traces", "cloudPhysicsIO.oracleGeneral.bin")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("libCacheSim's cloudPhysicsIO trace is not at %s (%v): skipping; it lives in ../shared/traces beside the project", path, err)
	}
	res := runJSON(t, path, "oracleGeneral", "lru,fifo,s3fifo,s3fifov0,arc,retention", "128MiB,1GiB", "-parallel", "2")
	want := []int64{93374, 71704, 93403, 72140, 90117, 56045, 89307, 70355, 90252, 64772, 93374, 71704}
	require.Len(t, res, len(want))
	for i, r := range res {
		require.Equal(t, int64(113872), r.Requests)
		require.Equal(t, want[i], r.Misses, "%s at %d", r.Policy, r.CacheSize)
	}
}
