package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/kvtier/kvtier/internal/parallel"
	"github.com/kvtier/kvtier/internal/progress"
)

// report is the outcome of a run: the setting and one row per policy and
// GPU size.
type report struct {
	cfg           config
	alpha, beta   float64
	modelName     string
	unitBytes     int64
	unitsPerBlock int
	blockBytes    int64
	sessions      int
	turns         int
	promptTokens  int64 // counted from the workload, not by the simulation
	sizes         []float64
	rows          []result
}

// simulateAll generates the workload of c and replays it under every policy
// at every GPU size. stderr, when not nil, gets a line as each run
// finishes.
func simulateAll(c config, stderr io.Writer) (*report, error) {
	l, err := newLayout(c)
	if err != nil {
		return nil, err
	}
	w := generate(c)
	rep := &report{cfg: c, modelName: l.Model().Name, unitsPerBlock: l.UnitsPerBlock(), blockBytes: l.BlockBytes(),
		unitBytes: l.Pools()[0].UnitBytes, sessions: len(w.sessions), turns: w.turns(), promptTokens: w.promptTokens()}
	rep.alpha, rep.beta = coefficients(c)
	rep.sizes = c.Sweep
	if len(rep.sizes) == 0 {
		rep.sizes = []float64{c.GPUGiB}
	}
	// Runs are independent (each has its own cache and clock; the workload
	// is only read), so they run in parallel; rows keep their order.
	type job struct {
		p   policy
		gpu float64
	}
	var jobs []job
	for _, g := range rep.sizes {
		for _, name := range c.Policies {
			p, _ := policyByName(name)
			jobs = append(jobs, job{p: p, gpu: g})
		}
	}
	// On failure the error is the first in report order.
	prog := progress.New(stderr, "multiturn", len(jobs))
	rep.rows, err = parallel.Map(jobs, runtime.GOMAXPROCS(0), func(j job) (result, error) {
		r, err := simulate(c, &w, j.p, j.gpu)
		if err == nil {
			prog.Done(fmt.Sprintf("%s at %.3g GiB", j.p.name, j.gpu))
		}
		return r, err
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// rowsAt returns the rows of GPU size g, in policy order.
func (rep *report) rowsAt(g float64) []result {
	var out []result
	for _, r := range rep.rows {
		if r.GPUGiB == g {
			out = append(out, r)
		}
	}
	return out
}

// writeText prints the setting, the table and the computed comparison of
// each GPU size.
func writeText(w io.Writer, rep *report) error {
	c := rep.cfg
	b := &strings.Builder{}
	fmt.Fprintf(b, "multiturn: %d sessions, %d turns, %d prompt tokens (seed %d)\n", rep.sessions, rep.turns, rep.promptTokens, c.Seed)
	fmt.Fprintf(b, "workload: Poisson arrivals %.3g/s, mean %.3g turns (max %d), %d system prompts of %d tokens, user mean %.0f, answer mean %.0f tokens, think mean %v, decode %v/token, context <= %d\n",
		c.Rate, c.TurnsMean, c.MaxTurns, c.SysPrompts, c.SysLen, c.UserMean, c.AnswerMean, c.ThinkMean, c.TPOT, c.MaxContext)
	fmt.Fprintf(b, "cache: %s, paged per layer, %d-token blocks: %d units of %s per block (%s); CPU %.3g GiB (%d blocks)\n",
		rep.modelName, c.BlockTokens, rep.unitsPerBlock, size(rep.unitBytes), size(rep.blockBytes), c.CPUGiB, int64(c.CPUGiB*gib)/rep.blockBytes)
	onboardBlock := float64(rep.blockBytes) / (c.LinkGBps * 1e9)
	fmt.Fprintf(b, "cost (assumed): prefill of a block = %.3g s x context tokens + %.3g ms; onboard of a block %.3g ms at %.3g GB/s; offload-or-drop by %s weights\n",
		rep.alpha, 1e3*rep.beta, 1e3*onboardBlock, c.LinkGBps, c.DecideWeights)
	for _, g := range rep.sizes {
		rows := rep.rowsAt(g)
		fmt.Fprintf(b, "\nGPU %.3g GiB (%d blocks)\n", g, int64(g*gib)/rep.blockBytes)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tturns\thit %\trecomputed\toffloads\tonboards\tdrops\tGiB moved\tTTFT mean ms\tp50 ms\tp99 ms\t")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n",
				r.Policy, r.Turns, r.HitPct, r.RecomputedTokens, r.Offloads, r.Onboards, r.Drops, r.GiBMoved, r.TTFTMeanMs, r.TTFTP50Ms, r.TTFTP99Ms)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, line := range explain(rep, rows) {
			fmt.Fprintln(b, line)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// explain returns sentences comparing rows of one GPU size; every number in
// them is computed from the rows.
func explain(rep *report, rows []result) []string {
	if len(rows) == 0 {
		return nil
	}
	base := rows[0]
	for _, r := range rows {
		if r.Policy == "lru" {
			base = r
		}
	}
	best := func(less func(a, b result) bool) result {
		w := rows[0]
		for _, r := range rows[1:] {
			if less(r, w) {
				w = r
			}
		}
		return w
	}
	var out []string
	// Admission does not depend on the policy (evictable units count as
	// room), so the waits are usually the same for every row: say it once.
	same := true
	for _, r := range rows {
		same = same && r.Deferred == rows[0].Deferred && r.WaitMeanMs == rows[0].WaitMeanMs
	}
	for _, r := range rows {
		if r.Deferred > 0 {
			who := r.Policy
			if same {
				who = "every policy"
			}
			out = append(out, fmt.Sprintf("%s: %d turns waited for GPU room next to the running turns (mean wait %.1f ms, not counted in TTFT).", who, r.Deferred, r.WaitMeanMs))
		}
		if same {
			break
		}
	}
	// vs compares the winner r's value a with the baseline's b (printed
	// with format f), or says nothing when r is the baseline.
	vs := func(r result, a, b float64, f, down string) string {
		if r.Policy == base.Policy {
			return ""
		}
		return fmt.Sprintf(" (%s than %s's "+f+")", change(a, b, down), base.Policy, b)
	}
	bt := best(func(a, b result) bool { return a.TTFTMeanMs < b.TTFTMeanMs })
	out = append(out, fmt.Sprintf("Lowest mean TTFT: %s, %.1f ms%s = prefill %.1f ms + onboard %.1f ms.",
		bt.Policy, bt.TTFTMeanMs, vs(bt, bt.TTFTMeanMs, base.TTFTMeanMs, "%.1f ms", "lower"), bt.ComputeMeanMs, bt.OnboardMeanMs))
	bp := best(func(a, b result) bool { return a.TTFTP99Ms < b.TTFTP99Ms })
	out = append(out, fmt.Sprintf("Lowest p99 TTFT: %s, %.1f ms%s.", bp.Policy, bp.TTFTP99Ms, vs(bp, bp.TTFTP99Ms, base.TTFTP99Ms, "%.1f ms", "lower")))
	br := best(func(a, b result) bool { return a.RecomputedTokens < b.RecomputedTokens })
	out = append(out, fmt.Sprintf("Fewest recomputed tokens: %s, %d%s; new tokens (user messages, first use of a system prompt) are %.1f%% of all prompt tokens.",
		br.Policy, br.RecomputedTokens, vs(br, float64(br.RecomputedTokens), float64(base.RecomputedTokens), "%.0f", "fewer"),
		pctOf(br.NewTokens, br.PromptTokens)))
	for _, r := range rows {
		if r.Policy == base.Policy {
			continue
		}
		out = append(out, fmt.Sprintf("%s vs %s: recomputed tokens %s, mean TTFT %s, p99 TTFT %s, bytes moved %s, drops %s.",
			r.Policy, base.Policy, signed(r.RecomputedTokens, base.RecomputedTokens), signedF(r.TTFTMeanMs, base.TTFTMeanMs),
			signedF(r.TTFTP99Ms, base.TTFTP99Ms), signed(r.BytesMoved, base.BytesMoved), signed(int64(r.Drops), int64(base.Drops))))
	}
	return out
}

// change says "12.3% lower" (a against b, down naming a decrease); it is
// only called with a <= b, b > 0 or a == b.
func change(a, b float64, down string) string {
	if a == b || b == 0 {
		return "no " + down
	}
	return fmt.Sprintf("%.1f%% %s", 100*(b-a)/b, down)
}

// signedF is the relative change of a against b as "+12.3%", or "=" when
// equal and "n/a" when b is 0.
func signedF(a, b float64) string {
	switch {
	case a == b:
		return "="
	case b == 0:
		return "n/a (lru 0)"
	}
	return fmt.Sprintf("%+.1f%%", 100*(a-b)/b)
}

// signed is signedF for counts.
func signed(a, b int64) string { return signedF(float64(a), float64(b)) }

// pctOf returns 100*a/b, or 0 when b is 0.
func pctOf(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// size formats bytes with a binary unit.
func size(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if f < 1024 || u == "GiB" {
			if f == math.Trunc(f) {
				return fmt.Sprintf("%.0f %s", f, u)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1024
	}
	return ""
}
