package main

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

const gib = 1 << 30

// result is one row of the report: one policy at one GPU size.
type result struct {
	Policy   string  `json:"policy"`
	GPUGiB   float64 `json:"gpu_gib"`
	CPUGiB   float64 `json:"cpu_gib"`
	Sessions int     `json:"sessions"`
	Turns    int     `json:"turns"`
	// PromptTokens = HitTokens + RecomputedTokens + NewTokens.
	PromptTokens int64 `json:"prompt_tokens"`
	// HitTokens were served from the cache (GPU, or copied back from the
	// CPU): Plan.ReusedTokens.
	HitTokens int64   `json:"hit_tokens"`
	HitPct    float64 `json:"hit_pct"`
	// RecomputedTokens are prompt tokens computed again although an
	// earlier turn had computed them: DroppedRecomputeTokens (blocks the
	// cache still knew, a unit of which was dropped: Plan.RecomputeTokens),
	// blocks it had forgotten, and the partial last block of the previous
	// turn (never shared, so freed at Release).
	RecomputedTokens       int64 `json:"recomputed_tokens"`
	DroppedRecomputeTokens int64 `json:"dropped_recompute_tokens"`
	// NewTokens were never computed before: user messages, and a system
	// prompt the first time any session uses it.
	NewTokens int64 `json:"new_tokens"`
	// Offloads, Onboards and Drops count units (Stats); Drops is the sum of
	// GPU drops (victims the cost model or a full CPU sent nowhere) and CPU
	// drops.
	Offloads uint64 `json:"offloads"`
	Onboards uint64 `json:"onboards"`
	Drops    uint64 `json:"drops"`
	GPUDrops uint64 `json:"gpu_drops"`
	CPUDrops uint64 `json:"cpu_drops"`
	// BytesMoved is offload plus onboard bytes (Stats.BytesMoved).
	BytesMoved int64   `json:"bytes_moved"`
	GiBMoved   float64 `json:"gib_moved"`
	// TTFT is the simulated time to first token of a turn: prefill of its
	// computed tokens plus its onboard copies, in series.
	TTFTMeanMs    float64 `json:"ttft_mean_ms"`
	TTFTP50Ms     float64 `json:"ttft_p50_ms"`
	TTFTP99Ms     float64 `json:"ttft_p99_ms"`
	ComputeMeanMs float64 `json:"compute_mean_ms"`
	OnboardMeanMs float64 `json:"onboard_mean_ms"`
	// Deferred counts turns whose start waited for a release because the
	// GPU could not hold their prompt and answer next to the running turns;
	// WaitMeanMs is their mean wait (not part of TTFT).
	Deferred   int     `json:"deferred"`
	WaitMeanMs float64 `json:"wait_mean_ms"`

	ttft []float64 // seconds, one per turn, sorted after the run
	// cacheRecomputed is the cache's own count of recomputed tokens
	// (Stats), which must equal DroppedRecomputeTokens, the plans' sum.
	cacheRecomputed int64
}

// event kinds.
const (
	turnStart = iota
	turnEnd
)

// event is a turn start or end of session s at virtual time at; order breaks
// ties in the order events were scheduled.
type event struct {
	at    time.Duration
	order uint64
	kind  int
	s     int
}

// eventQueue is a min-heap of events by (at, order).
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].order < q[j].order
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// sessionState is what the simulation remembers of a session between turns.
type sessionState struct {
	conv []uint32 // the conversation so far (system prompt, messages, answers)
	turn int      // the turn running or next to run
	seq  kvcache.SeqID
}

// sim replays one workload on one cache.
type sim struct {
	cfg   config
	w     *workload
	pol   policy
	cache *kvcache.Cache
	clock *eviction.ManualClock
	costs costs
	queue eventQueue
	order uint64
	waits []event // deferred events, in the order they were deferred
	state []sessionState
	seen  []bool // system prompt computed once already
	now   time.Duration
	res   result
	// reserved is the GPU slots the running turns' answers will take.
	reserved int
	waitNs   float64 // total wait of deferred events
	// compSum and onbSum are the prefill and onboard seconds of all turns.
	compSum, onbSum float64
}

// newLayout builds the paged, per-layer layout of config c.
func newLayout(c config) (*layout.Layout, error) {
	return layout.New(models()[c.Model].model, layout.PagedLayer, c.BlockTokens)
}

// decideModel is the recompute cost the cache uses to choose offload or drop for
// a GPU victim. The same coefficients as the retention policies; the weights
// follow -decide-weights (flat by default, so that every policy row faces the
// same offload rule and differs only in its choice of victims).
func decideModel(c config) *costmodel.Recompute {
	alpha, beta := coefficients(c)
	r := costmodel.Recompute{Alpha: alpha, Beta: beta}
	if c.DecideWeights == "flat" {
		r.LayerWeight, r.PositionWeight = costmodel.Flat, costmodel.Flat
	}
	return &r
}

// simulate replays w under policy p with a GPU of gpuGiB and returns its row.
func simulate(c config, w *workload, p policy, gpuGiB float64) (result, error) {
	l, err := newLayout(c)
	if err != nil {
		return result{}, err
	}
	pr, err := newCosts(c, l)
	if err != nil {
		return result{}, err
	}
	alpha, beta := coefficients(c)
	clock := &eviction.ManualClock{}
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Bytes: int64(gpuGiB * gib)}, kvcache.Capacity{Bytes: int64(c.CPUGiB * gib)})
	for i := range tiers {
		tiers[i].Policy = p.factory(alpha, beta)
	}
	if len(tiers) > 1 { // no CPU tier when -cpu is 0
		tiers[1].Link = costmodel.Link{BytesPerSecond: c.LinkGBps * 1e9}
	}
	cache, err := kvcache.New(kvcache.Config{
		Layout:    l,
		Tiers:     tiers,
		Recompute: decideModel(c),
		Clock:     clock,
		HashSeed:  c.Seed,
	})
	if err != nil {
		return result{}, err
	}
	m := &sim{cfg: c, w: w, pol: p, cache: cache, clock: clock, costs: pr,
		state: make([]sessionState, len(w.sessions)), seen: make([]bool, len(w.sys))}
	m.res = result{Policy: p.name, GPUGiB: gpuGiB, CPUGiB: c.CPUGiB, Sessions: len(w.sessions)}
	for i, s := range w.sessions {
		if len(s.turns) == 0 {
			continue
		}
		if s.sys >= 0 {
			m.state[i].conv = append([]uint32(nil), w.sys[s.sys]...)
		}
		m.push(s.arrival, turnStart, i)
	}
	if err := m.loop(); err != nil {
		return result{}, fmt.Errorf("%s at %.3g GiB GPU: %w", p.name, gpuGiB, err)
	}
	m.finish()
	return m.res, nil
}

// push schedules an event.
func (m *sim) push(at time.Duration, kind, s int) {
	m.order++
	heap.Push(&m.queue, event{at: at, order: m.order, kind: kind, s: s})
}

// loop runs events in time order until none is left.
func (m *sim) loop() error {
	for m.queue.Len() > 0 {
		e := heap.Pop(&m.queue).(event)
		m.now = e.at
		m.clock.Set(m.now)
		if e.kind == turnStart && len(m.waits) > 0 {
			// First come, first served: a new turn queues behind the
			// waiting ones.
			m.waits = append(m.waits, e)
			m.res.Deferred++
			if err := m.retry(); err != nil {
				return err
			}
			continue
		}
		done, err := m.handle(e)
		if err != nil {
			return err
		}
		if !done {
			m.waits = append(m.waits, e)
			m.res.Deferred++
		}
	}
	if len(m.waits) > 0 {
		// Every turn has ended, so the GPU holds nothing pinned.
		return fmt.Errorf("%w: session %d's turn %d does not fit on the idle GPU (its prompt and answer need more slots than the GPU has)",
			kvcache.ErrNoSpace, m.waits[0].s, m.state[m.waits[0].s].turn)
	}
	return nil
}

// handle runs one event; done is false when a turn cannot start yet (it
// must wait for a release).
func (m *sim) handle(e event) (done bool, err error) {
	if e.kind == turnStart {
		return m.start(e)
	}
	return true, m.end(e)
}

// start acquires a turn's prompt: the conversation so far plus the user
// message.
func (m *sim) start(e event) (bool, error) {
	st := &m.state[e.s]
	ses := &m.w.sessions[e.s]
	t := &ses.turns[st.turn]
	prompt := append(st.conv, t.user...)
	req := kvcache.Request{Tokens: prompt}
	sysLen := 0
	if ses.sys >= 0 {
		sysLen = len(m.w.sys[ses.sys])
	}
	if m.pol.priorities {
		req.Priorities = turnPriorities(sysLen, len(prompt))
	}
	// Admission, as a server's scheduler does it: start the turn only if
	// the GPU can also hold its answer and the answers of the turns already
	// running, so that a decode never finds the GPU full of pinned units.
	adm, err := m.cache.Admit(req)
	if err != nil {
		return false, err
	}
	answer := m.answerSlots(len(prompt), len(t.answer))
	if adm.FreeSlots-adm.NeedSlots < answer+m.reserved {
		return false, nil
	}
	plan, err := m.cache.Acquire(req)
	if err != nil {
		return false, err
	}
	m.reserved += answer
	st.conv, st.seq = prompt, plan.Seq
	// The prefill runs at admission in this simulation (TTFT is computed,
	// not waited for): its blocks are written and shared from now on.
	if err := m.cache.Commit(plan.Seq, len(prompt)); err != nil {
		return false, err
	}

	computed := 0
	for _, r := range plan.Compute {
		computed += r.Len()
	}
	if plan.ReusedTokens+computed != len(prompt) {
		return false, fmt.Errorf("session %d turn %d: %d reused + %d computed tokens != %d prompt tokens",
			e.s, st.turn, plan.ReusedTokens, computed, len(prompt))
	}
	fresh := len(t.user)
	if st.turn == 0 && ses.sys >= 0 && !m.seen[ses.sys] {
		fresh += sysLen
		m.seen[ses.sys] = true
	}
	if computed < fresh {
		return false, fmt.Errorf("session %d turn %d: %d computed tokens < %d never-seen tokens (a hit on tokens no one computed)",
			e.s, st.turn, computed, fresh)
	}
	m.res.Turns++
	m.res.PromptTokens += int64(len(prompt))
	m.res.HitTokens += int64(plan.ReusedTokens)
	m.res.NewTokens += int64(fresh)
	m.res.RecomputedTokens += int64(computed - fresh)
	m.res.DroppedRecomputeTokens += int64(plan.RecomputeTokens)
	// Reused tokens are whole blocks, each unit of which was a GPU hit or
	// an onboard, exactly once: a block kvcache recomputes (one of its
	// units was dropped) is written into fresh slots, none of its units
	// a hit.
	b, upb := m.cfg.BlockTokens, m.cache.Layout().UnitsPerBlock()
	if plan.ReusedTokens%b != 0 {
		return false, fmt.Errorf("session %d turn %d: %d reused tokens are not whole %d-token blocks", e.s, st.turn, plan.ReusedTokens, b)
	}
	reusedUnits := plan.ReusedTokens / b * upb
	if plan.Hits+plan.Onboarded != reusedUnits {
		return false, fmt.Errorf("session %d turn %d: %d hit and %d onboarded units do not cover the %d units of the reused blocks exactly once",
			e.s, st.turn, plan.Hits, plan.Onboarded, reusedUnits)
	}

	comp := m.costs.computeSeconds(plan.Compute)
	onb, err := m.costs.onboardSeconds(m.costs.onboardBytes(plan.Executed))
	if err != nil {
		return false, err
	}
	m.compSum += comp
	m.onbSum += onb
	m.res.ttft = append(m.res.ttft, comp+onb)
	if m.now > e.at {
		m.waitNs += float64(m.now - e.at)
	}
	// The turn keeps its KV pinned while it decodes. TTFT is left out of
	// the schedule so that every policy replays the same timeline.
	m.push(m.now+time.Duration(len(t.answer))*m.cfg.TPOT, turnEnd, e.s)
	return true, nil
}

// answerSlots is the GPU slots decoding answer tokens after a prompt of
// prompt tokens takes: one unit per slice for every block it opens (the
// prompt's partial last block already has its slots).
func (m *sim) answerSlots(prompt, answer int) int {
	b := m.cfg.BlockTokens
	opened := (prompt+answer+b-1)/b - (prompt+b-1)/b
	return opened * m.cache.Layout().UnitsPerBlock()
}

// end decodes a turn's answer, releases the sequence and schedules the
// session's next turn after its think time.
func (m *sim) end(e event) error {
	st := &m.state[e.s]
	ses := &m.w.sessions[e.s]
	t := &ses.turns[st.turn]
	p, err := m.cache.Append(st.seq, t.answer...)
	if err != nil {
		// Admission reserved the answer's slots: ErrNoSpace here is a bug.
		return err
	}
	m.reserved -= m.answerSlots(len(st.conv), len(t.answer))
	// The answer was decoded: everything the turn holds is written, and
	// shared with the session's next turn.
	if err := m.cache.Commit(st.seq, p.Tokens); err != nil {
		return err
	}
	if err := m.cache.Release(st.seq); err != nil {
		return err
	}
	st.conv = append(st.conv, t.answer...)
	st.turn++
	if st.turn < len(ses.turns) {
		m.push(m.now+t.think, turnStart, e.s)
	}
	return m.retry()
}

// retry starts the waiting turns in the order they arrived, up to the first
// that still does not fit (first come, first served).
func (m *sim) retry() error {
	for len(m.waits) > 0 {
		done, err := m.start(m.waits[0])
		if err != nil || !done {
			return err
		}
		m.waits = m.waits[1:]
	}
	return nil
}

// finish fills the row's totals from the cache's counters and the TTFTs.
func (m *sim) finish() {
	r := &m.res
	st := m.cache.Stats()
	r.Offloads, r.Onboards = st.Offloads, st.Onboards
	r.GPUDrops, r.CPUDrops = st.Tier(kvcache.GPU).Drops, st.Tier(kvcache.CPU).Drops
	r.Drops = r.GPUDrops + r.CPUDrops
	r.BytesMoved = st.BytesMoved
	r.cacheRecomputed = st.RecomputedTokens
	r.GiBMoved = float64(st.BytesMoved) / gib
	if r.PromptTokens > 0 {
		r.HitPct = 100 * float64(r.HitTokens) / float64(r.PromptTokens)
	}
	if n := float64(len(r.ttft)); n > 0 {
		sort.Float64s(r.ttft)
		var sum float64
		for _, v := range r.ttft {
			sum += v
		}
		r.TTFTMeanMs = 1e3 * sum / n
		r.TTFTP50Ms = 1e3 * percentile(r.ttft, 0.50)
		r.TTFTP99Ms = 1e3 * percentile(r.ttft, 0.99)
		r.ComputeMeanMs = 1e3 * m.compSum / n
		r.OnboardMeanMs = 1e3 * m.onbSum / n
	}
	if r.Deferred > 0 {
		r.WaitMeanMs = m.waitNs / float64(r.Deferred) / 1e6
	}
}

// percentile returns the nearest-rank q-quantile of sorted values.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
