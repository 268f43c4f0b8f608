package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// smallArgs is a run small enough for CI under -race: the seed model with
// half the context (1.75 GiB of KV), so the sizes around it are scaled too.
var smallArgs = []string{"-sequences", "2", "-steps", "4", "-seed", "7", "-context", "2048",
	"-sizes", "0.5,1,1.5,1.75,2,3"}

// smallContextGiB is the KV of smallArgs' context: 2048 tokens x 28 layers x
// 8 KV heads x 1024 dims x 2 (K, V) x 2 bytes.
const smallContextGiB = 1.75

func runJSON(t *testing.T, args ...string) []result {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(append(args, "-json"), &out, io.Discard))
	var rs []result
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r result
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		rs = append(rs, r)
	}
	require.NoError(t, sc.Err())
	return rs
}

func TestSmallRunProperties(t *testing.T) {
	rs := runJSON(t, smallArgs...)
	require.Len(t, rs, 2*5*6, "2 layouts x 5 policies x 6 sizes")

	accesses := map[string]int64{}
	for _, r := range rs {
		name := r.Layout + "/" + r.Policy
		unitMiB := map[string]float64{"paged": 1, "bsa": 2}[r.Layout]
		require.Equal(t, unitMiB, r.UnitMiB, name)
		require.Equal(t, int(r.GPUGiB*1024/unitMiB), r.GPUUnits, name)

		// Worst cases at 2048 tokens: 4 blocks x 16 pages x 28 layers
		// for paged, 4 blocks (top-3 of two heads would allow 5) x 8 KV
		// heads x 28 layers for BSA; no step touches more.
		worst := map[string]int64{"paged": 1792, "bsa": 896}[r.Layout]
		require.Equal(t, worst, r.WorstUnitsPerStep, name)
		require.LessOrEqual(t, int64(r.MaxUnitsPerStep), worst, name)
		require.Positive(t, r.MaxUnitsPerStep)

		// Which units a step touches does not depend on the cache: every
		// policy and size of a layout sees the same accesses.
		if a, ok := accesses[r.Layout]; ok {
			require.Equal(t, a, r.Accesses, name)
		}
		accesses[r.Layout] = r.Accesses
		require.Equal(t, r.Accesses, r.Hits+r.Misses)

		// The CPU holds the whole context: every miss is an onboard of
		// one unit, nothing is recomputed.
		require.Zero(t, r.Recomputed, name)
		require.InDelta(t, r.MissesPerStep*unitMiB, r.MiBOnboardPerStep, 1e-9, name)
		require.InDelta(t, r.UnitsPerStep*unitMiB, r.MiBReadPerStep, 1e-9, name)

		// A GPU that holds the context never evicts: after the prefill
		// wrote every unit to the GPU, every decode access is a hit.
		if r.GPUGiB >= smallContextGiB {
			require.Equal(t, 1.0, r.HitRate, name)
			require.Zero(t, r.Misses, name)
		} else {
			require.Positive(t, r.Misses, "%s at %g GiB", name, r.GPUGiB)
		}
	}

	// LRU and prioritized LRU with fixed priorities are stack algorithms
	// here: the cache holds the pinned units plus the top of one order
	// (priority, then last release) that does not depend on the capacity,
	// so a larger GPU holds a superset and hits at least as often. FIFO,
	// S3-FIFO and retention carry no such guarantee and are not checked.
	for _, lay := range []string{"paged", "bsa"} {
		for _, pol := range []string{"lru", "prio-lru"} {
			prev := -1.0
			for _, r := range rs {
				if r.Layout == lay && r.Policy == pol {
					require.GreaterOrEqual(t, r.HitRate, prev, "%s/%s at %g GiB", lay, pol, r.GPUGiB)
					prev = r.HitRate
				}
			}
		}
	}
}

// TestSeedWorstCase checks the seed's arithmetic at its own context, 4096
// tokens: 8 blocks x 16 pages x 28 layers = 3584 one-MiB pages (3.5 GiB)
// for paged, 5 blocks x 8 KV heads x 28 layers = 1120 two-MiB blocks
// (2240 MiB) for BSA, and that real steps stay within them.
func TestSeedWorstCase(t *testing.T) {
	rs := runJSON(t, "-sequences", "1", "-steps", "3", "-policies", "lru", "-sizes", "1")
	require.Len(t, rs, 2)
	for _, r := range rs {
		worst := map[string]int64{"paged": 3584, "bsa": 1120}[r.Layout]
		require.Equal(t, worst, r.WorstUnitsPerStep, r.Layout)
		require.Equal(t, map[string]float64{"paged": 3584, "bsa": 2240}[r.Layout], float64(worst)*r.UnitMiB)
		require.LessOrEqual(t, int64(r.MaxUnitsPerStep), worst, r.Layout)
		// Uniform top-3 over 7 earlier blocks: 16 heads cover nearly all
		// of them, so a paged step reads close to the worst case.
		if r.Layout == "paged" {
			require.Greater(t, r.UnitsPerStep, 0.9*float64(worst))
		}
	}
}

// Each configuration writes one progress line to stderr, and none of them
// reaches stdout.
func TestProgressOnStderr(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run([]string{"-sequences", "1", "-steps", "2", "-layouts", "bsa", "-policies", "lru,fifo", "-sizes", "1,2", "-json"}, &out, &errOut))
	require.NotContains(t, out.String(), "done (")
	lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
	require.Len(t, lines, 4, errOut.String())
	for _, l := range lines {
		require.Regexp(t, `^bsasim: bsa/(lru|fifo)/[12] GiB done \([1-4]/4, [0-9hms]+\)$`, l)
	}
}

func TestJSONFields(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run([]string{"-sequences", "1", "-steps", "2", "-layouts", "bsa", "-policies", "lru", "-sizes", "1", "-json"}, &out, io.Discard))
	var m map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &m))
	for _, k := range []string{"layout", "policy", "gpu_gib", "gpu_units", "unit_mib", "selector", "sequences",
		"steps_per_sequence", "context_tokens", "selector_p", "sink_priority", "topk", "seed", "hit_rate", "hit_rate_sd", "accesses", "hits", "misses",
		"recomputed_units", "units_per_step", "max_units_per_step", "worst_case_units_per_step", "misses_per_step",
		"mib_read_per_step", "mib_onboarded_per_step", "mib_offloaded_per_step"} {
		require.Contains(t, m, k)
	}
	require.Equal(t, "bsa", m["layout"])
	require.Equal(t, 512.0, m["gpu_units"])
}

// TestUnitsMatchLayout checks the units kvcache reports per step against
// an independent count: layout.Touched of the same MoBA selection.
func TestUnitsMatchLayout(t *testing.T) {
	for _, sel := range []string{"uniform", "sticky", "sink"} {
		cfg, err := parseFlags([]string{"-sequences", "2", "-steps", "5", "-selector", sel, "-context", "2100"}, io.Discard)
		require.NoError(t, err)
		m := layout.SeedModel()
		w, err := newWorkload(&cfg, m)
		require.NoError(t, err)
		for _, ln := range []string{"paged", "bsa"} {
			lay, err := layoutFor(ln, m, &cfg)
			require.NoError(t, err)
			pol, err := policyFor("lru", &cfg)
			require.NoError(t, err)
			r, err := simulate(job{layoutName: ln, lay: lay, pol: pol, sizeGiB: 1}, w, &cfg)
			require.NoError(t, err)
			require.Len(t, r.stepUnits, cfg.sequences*cfg.steps)
			for s := range cfg.sequences {
				for st := range cfg.steps {
					u, err := lay.Touched(w.selection(s, st))
					require.NoError(t, err)
					require.Equal(t, int(u.Units), r.stepUnits[s*cfg.steps+st], "%s %s seq %d step %d", sel, ln, s, st)
				}
			}
		}
	}
}

func TestTextReport(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-sequences", "1", "-steps", "2", "-policies", "lru,s3fifo", "-sizes", "1,3,4"}
	require.NoError(t, run(args, &out, io.Discard))
	text := out.String()
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		require.LessOrEqual(t, len(line), 80, "line too wide: %q", line)
		if strings.HasPrefix(line, "paged ") || strings.HasPrefix(line, "bsa ") {
			rows++
		}
	}
	require.Equal(t, 2*2*3, rows, "one row per configuration")
	require.Contains(t, text, "claim vs measured")
	require.Contains(t, text, "MiB onboarded per decode step")
	// The claim block quotes the measured numbers, not fixed ones.
	rs := runJSON(t, args...)
	lru, ok := find(rs, "paged", "lru", 3)
	require.True(t, ok)
	s3, ok := find(rs, "paged", "s3fifo", 3)
	require.True(t, ok)
	require.Contains(t, text, fmt.Sprintf("paged S3-FIFO misses %.1f%% at 3 GiB (LRU %.1f%%)", missPct(s3), missPct(lru)))
	want := "does not hold"
	if missPct(s3) >= 25 && missPct(s3) <= 45 {
		want = "holds"
	}
	require.Contains(t, text, "\"S3-FIFO misses about 35% at 3 GB\" (+-10 points): "+want+"\n")
}

func TestDeterministic(t *testing.T) {
	args := []string{"-sequences", "2", "-steps", "3", "-sizes", "1,2", "-selector", "sticky", "-layouts", "bsa"}
	var a, b, c bytes.Buffer
	require.NoError(t, run(args, &a, io.Discard))
	require.NoError(t, run(append(args, "-parallel", "1"), &b, io.Discard))
	require.Equal(t, a.String(), b.String(), "output does not depend on scheduling")
	require.NoError(t, run(append(args, "-seed", "99"), &c, io.Discard))
	require.NotEqual(t, a.String(), c.String(), "the seed matters")
}

func TestSelectors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := config{selector: "uniform"}
	u, err := newSelector(&cfg, 2, 4, rng)
	require.NoError(t, err)
	for range 1000 {
		cur := 1 + rng.IntN(10)
		got := u.Pick(nil, 0, 0, cur, 2)
		require.Len(t, got, min(2, cur))
		require.True(t, slices.IsSorted(got))
		require.Len(t, slices.Compact(slices.Clone(got)), len(got), "distinct")
		for _, b := range got {
			require.True(t, b >= 0 && int(b) < cur)
		}
	}
	// Uniform: every earlier block about equally often.
	counts := make([]int, 7)
	for range 7000 {
		for _, b := range u.Pick(nil, 0, 0, 7, 2) {
			counts[b]++
		}
	}
	for b, n := range counts {
		require.InDelta(t, 2000, n, 200, "block %d", b)
	}

	// Sticky with p=1 never changes its picks while the current block
	// stays; with p=0 it redraws them.
	cfg = config{selector: "sticky", stickyP: 1}
	st, err := newSelector(&cfg, 2, 4, rng)
	require.NoError(t, err)
	first := st.Pick(nil, 1, 3, 7, 2)
	for range 50 {
		require.Equal(t, first, st.Pick(nil, 1, 3, 7, 2))
	}
	require.Equal(t, first, st.Pick(nil, 1, 3, 8, 2), "still valid picks are kept when a new block starts")
	cfg.stickyP = 0
	st, err = newSelector(&cfg, 2, 4, rng)
	require.NoError(t, err)
	changed := 0
	prev := st.Pick(nil, 0, 0, 7, 2)
	for range 100 {
		cur := st.Pick(nil, 0, 0, 7, 2)
		if !slices.Equal(prev, cur) {
			changed++
		}
		prev = cur
	}
	require.Greater(t, changed, 80)

	// Sink: p=1 always includes block 0, p=0 never does.
	for _, p := range []float64{0, 1} {
		cfg = config{selector: "sink", sinkP: p}
		sk, err := newSelector(&cfg, 1, 1, rng)
		require.NoError(t, err)
		for range 200 {
			got := sk.Pick(nil, 0, 0, 7, 2)
			require.Len(t, got, 2)
			require.Equal(t, p == 1, got[0] == 0)
			require.Len(t, slices.Compact(slices.Clone(got)), 2)
		}
	}
	require.Empty(t, sink{rng: rng, p: 1}.Pick(nil, 0, 0, 0, 2), "no earlier block: nothing to pick")
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-layouts", "dense"},
		{"-policies", "lru,lru"},
		{"-policies", "opt"},
		{"-sizes", "0"},
		{"-sizes", "1,x"},
		{"-sequences", "0"},
		{"-steps", "4096"},
		{"-topk", "0"},
		{"-selector", "oracle"},
		{"-sticky-p", "1.5"},
		{"-sink-p", "-1"},
		{"-sink-priority", "101"},
		{"-page", "48"},
		{"-page", "1024"},
		{"-parallel", "0"},
		{"-nosuchflag"},
		{"extra"},
	} {
		err := run(args, io.Discard, io.Discard)
		require.ErrorIs(t, err, errUsage, "%v", args)
	}
	// A GPU too small for one layer's selection plus the block being
	// written is reported, not hidden.
	err := run([]string{"-sequences", "1", "-steps", "1", "-layouts", "bsa", "-policies", "lru", "-sizes", "0.25"}, io.Discard, io.Discard)
	require.Error(t, err)
	require.Contains(t, err.Error(), "no space")
}

func TestSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hit.svg")
	require.NoError(t, run([]string{"-sequences", "1", "-steps", "1", "-sizes", "1,4", "-context", "1024", "-svg", path}, io.Discard, io.Discard))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	d := xml.NewDecoder(f)
	lines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	require.Equal(t, 2*5, lines, "one curve per layout and policy")
}

func TestContextGiB(t *testing.T) {
	cfg := config{context: 4096}
	require.Equal(t, 3.5, contextGiB(&cfg), "the seed's 3.5 GiB of KV at 4096 tokens")
}

// entryRecorder is an LRU that records the Entry of every unit inserted.
type entryRecorder struct {
	eviction.Policy[kvcache.UnitID]
	entries *[]eviction.Entry
}

func (r entryRecorder) Insert(k kvcache.UnitID, e eviction.Entry) error {
	*r.entries = append(*r.entries, e)
	return r.Policy.Insert(k, e)
}

// TestPrefillKnowsPromptLength: the sparse Acquire carries the prompt, so
// every prompt block, although written by Append block by block, reaches
// the policies with Chunks = the prompt's blocks (the retention policy's
// position weight (chunk+1)/chunks then varies along the prompt), and
// decode blocks with Chunks = Chunk+1.
func TestPrefillKnowsPromptLength(t *testing.T) {
	cfg, err := parseFlags([]string{"-sequences", "1", "-steps", "100", "-context", "2100"}, io.Discard)
	require.NoError(t, err)
	m := layout.SeedModel()
	w, err := newWorkload(&cfg, m)
	require.NoError(t, err)
	lay, err := layoutFor("bsa", m, &cfg)
	require.NoError(t, err)
	var entries []eviction.Entry
	pol := policy{name: "recorder", factory: func(kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) {
		return entryRecorder{Policy: eviction.NewLRU[kvcache.UnitID](), entries: &entries}, nil
	}}
	_, err = simulate(job{layoutName: "bsa", lay: lay, pol: pol, sizeGiB: 1}, w, &cfg)
	require.NoError(t, err)
	promptBlocks := (cfg.prompt() + cfg.blockTokens - 1) / cfg.blockTokens // 2000 tokens: 4, the last partial
	seen := map[int]bool{}
	for _, e := range entries {
		seen[e.Chunk] = true
		if e.Chunk < promptBlocks {
			require.Equal(t, promptBlocks, e.Chunks, "prompt block %d", e.Chunk)
		} else {
			require.Equal(t, e.Chunk+1, e.Chunks, "decode block %d", e.Chunk)
		}
	}
	require.Len(t, seen, promptBlocks+1, "decoding to 2100 tokens opens block 4")
}
