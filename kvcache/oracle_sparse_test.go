package kvcache_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
)

// The oracle's sparse sequences. A configuration with sparse set serves
// every request as a sparse sequence (Request.Sparse): Acquire takes only
// the cached prefix of whole blocks and pins nothing, the rest of the prompt
// is appended (a block at a time, or a token at a time under sliding
// windows) and then each generated token, and every layer of every step
// reads the blocks before the appended ones only through SparseAccess. The
// model's sparse layers (tinyModel.sparse) attend, in every step, prefill
// and decode alike, only over the blocks tinyModel.selected names; its
// other layers select every block. The no-cache twin runs the same model
// over its own full K/V, so the outputs must still be bit-identical.
//
// A unit a SparseAccess gives From Dropped is restored honestly: the server
// runs the block's tokens through the layers below (SparseAccess with Keep
// for each, restoring in turn what those find dropped) to get their hidden
// state at the layer, and writes the K/V it gives. The selections are a
// pure function of (position, layer, head), so the recompute reads what the
// first computation read, and every K/V it recomputes for a unit that
// holds bytes must equal those bytes.

// unitKey names one unit of a sequence: a layout slice and a block index.
type unitKey struct{ slice, block int }

// sparseState is what a sparse sequence's server keeps during a step.
type sparseState struct {
	res kvcache.SparseResult
	// held maps each unit of the SparseAccess calls since the last one
	// without Keep to the answer that gave it: what the cache pins for
	// the kernels now, with the blocks of the last Append.
	held map[unitKey]kvcache.SparseUnit
	// appended lists the blocks the last Append wrote (pinned by it).
	appended []int
	// fresh maps each restored unit to the token offsets of its block
	// written so far (bit t for offset t): reading an offset not written
	// yet is an error, and the next declaration requires every offset.
	fresh map[unitKey]uint32
	// rewritten lists the units restored since the last declaration
	// (Append, Commit): Readiness reports a failed load's block until
	// then, and a unit restored once is not restored again.
	rewritten map[unitKey]bool
}

func (q *oracleSeq) initSparse() {
	q.sp.held = map[unitKey]kvcache.SparseUnit{}
	q.sp.fresh = map[unitKey]uint32{}
	q.sp.rewritten = map[unitKey]bool{}
}

// unitOf returns the unit that holds head h of layer l at position p.
func (q *oracleSeq) unitOf(l, h, p int) unitKey {
	return unitKey{slice: q.s.loc[l][h][0][p%q.s.block].slice, block: p / q.s.block}
}

// blockPositions returns the positions of block b the sequence holds.
func (q *oracleSeq) blockPositions(b int) []int {
	var ps []int
	for p := b * q.s.block; p < min((b+1)*q.s.block, len(q.tokens)); p++ {
		ps = append(ps, p)
	}
	return ps
}

// selection returns, per stored KV head, the blocks layer l reads for the
// positions ps: the union of their selections in a sparse layer, every
// block up to the last position's in the others (the cache leaves out
// those wholly before a sliding window).
func (q *oracleSeq) selection(l int, ps []int) [][]int {
	m := q.s.m
	sel := make([][]int, m.kvHeads)
	for h := range sel {
		for _, p := range ps {
			if m.sparse[l] {
				sel[h] = append(sel[h], m.selected(l, h, p)...)
				continue
			}
			for b := 0; b <= p/q.s.block; b++ {
				sel[h] = append(sel[h], b)
			}
		}
		slices.Sort(sel[h])
		sel[h] = slices.Compact(sel[h])
	}
	return sel
}

// settled returns an error unless every unit restored since the last
// SparseAccess without Keep is wholly written: the sequence's next
// SparseAccess without Keep, Append or Commit declares them written.
func (q *oracleSeq) settled() error {
	for u, mask := range q.sp.fresh {
		n := len(q.blockPositions(u.block))
		if mask != 1<<n-1 {
			return fmt.Errorf("oracle: seq %d: the server left restored unit %+v unwritten (offsets %08b of %d)", q.id, u, mask, n)
		}
	}
	return nil
}

// access runs SparseAccess for layer l with sel, for the queries at
// positions q (the zero range: the tokens of the last Append), waits (with an engine)
// for the units it brings, and returns the units the server must restore
// before reading them: those given From Dropped, and with an engine those
// whose loads failed (Readiness.Recompute). It checks the answer against
// the block tables and counts what happened.
func (q *oracleSeq) access(l int, sel [][]int, keep bool, queries kvcache.TokenRange) ([]unitKey, error) {
	s := q.s
	if !keep {
		if err := q.settled(); err != nil {
			return nil, err
		}
		clear(q.sp.held)
		clear(q.sp.fresh)
	}
	res := &q.sp.res
	if err := s.c.SparseAccess(q.id, kvcache.Selection{Layer: l, Blocks: sel, Keep: keep, Queries: queries}, res); err != nil {
		return nil, noSpace(fmt.Errorf("SparseAccess(layer %d, keep %v): %w", l, keep, err))
	}
	s.sparseCalls.Add(1)
	if keep {
		s.sparseKeeps.Add(1)
	}
	var fresh []unitKey
	onboards := 0
	for _, u := range res.Units {
		k := unitKey{u.Slice, u.Block}
		switch u.From {
		case kvcache.GPU:
		case kvcache.Dropped:
			fresh = append(fresh, k)
		default:
			onboards++
		}
		q.sp.held[k] = u
	}
	if onboards != res.Onboarded || len(fresh) != res.Computed {
		return nil, fmt.Errorf("oracle: seq %d: SparseAccess counts %d onboarded and %d computed, its units say %d and %d", q.id, res.Onboarded, res.Computed, onboards, len(fresh))
	}
	s.sparseOnboards.Add(int64(onboards))
	s.sparseRestores.Add(int64(len(fresh)))
	// With an engine the onboarded units are readable, and the fresh
	// slots writable (a victim's move down may still read one), once
	// Readiness reports the layer: the server waits for this layer only,
	// as one that overlaps a layer's loads with the kernels of the layers
	// before it would. A load that failed leaves its unit
	// unwritten: Readiness names only its block's tokens, so the server
	// restores every unit of that block this call onboarded. It does so
	// even for a unit it restored earlier in the step: Readiness reports
	// a block until the next declaration, and a unit restored, unpinned,
	// moved down and onboarded again may have failed again, which the
	// server cannot tell from the earlier failure still reported.
	rec, err := q.wait(l)
	if err != nil {
		return nil, err
	}
	for _, b := range rangeBlocks(rec, s.block) {
		found := false
		for _, u := range res.Units {
			k := unitKey{u.Slice, u.Block}
			if u.Block != b || u.From == kvcache.GPU || u.From == kvcache.Dropped || slices.Contains(fresh, k) {
				continue
			}
			fresh = append(fresh, k)
			s.sparseFailed.Add(1)
			found = true
		}
		for k := range q.sp.rewritten {
			found = found || k.block == b
		}
		if !found {
			return nil, fmt.Errorf("oracle: seq %d: Readiness asks to recompute block %d (%v), of which layer %d's SparseAccess onboarded nothing and the server restored nothing: which unit failed?", q.id, b, rec, l)
		}
	}
	for _, k := range fresh {
		q.sp.fresh[k] = 0
		q.sp.rewritten[k] = true
	}
	if err := q.refresh(); err != nil {
		return nil, err
	}
	for k, u := range q.sp.held {
		if t := q.tables[k.slice]; k.block >= len(t) || t[k.block] != u.Slot || u.Pool != s.c.SlicePool(k.slice) {
			return nil, fmt.Errorf("oracle: seq %d: SparseAccess gave unit %+v at pool %d slot %d, the block table says %v", q.id, k, u.Pool, u.Slot, t)
		}
	}
	return fresh, nil
}

// rangeBlocks returns the blocks that hold the positions of rs, ascending.
func rangeBlocks(rs []kvcache.TokenRange, block int) []int {
	var bs []int
	for _, p := range rangePositions(rs) {
		bs = append(bs, p/block)
	}
	return slices.Compact(bs)
}

// restore writes the K/V of layer l into the units of keys, except those of
// the blocks in skip (whose tokens the caller is computing in layer l, so
// its own pass writes them): for each block, it recomputes the hidden
// state of the block's tokens at layer l (see hidden) and writes the K/V
// that gives.
func (q *oracleSeq) restore(l int, keys []unitKey, skip []int) error {
	var blocks []int
	for _, k := range keys {
		if !slices.Contains(skip, k.block) {
			blocks = append(blocks, k.block)
		}
	}
	slices.Sort(blocks)
	for _, b := range slices.Compact(blocks) {
		ps := q.blockPositions(b)
		xs, err := q.hidden(ps, l)
		if err != nil {
			return err
		}
		for i, p := range ps {
			if err := q.s.m.writeKV(sparseKV{q}, l, p, rmsNorm(nil, xs[i])); err != nil {
				return err
			}
		}
	}
	return nil
}

// hidden returns the input of layer l of the tokens at positions ps (one
// block's), running them through layers 0 to l-1 as Selection.Keep
// describes: a SparseAccess with Keep for each layer, so that what the
// caller pinned stays pinned, the restores that finds, then the layer.
// The K/V it computes go into units it restores and must equal those of
// the units that hold bytes (sparseKV.write).
func (q *oracleSeq) hidden(ps []int, l int) ([][]float32, error) {
	xs := make([][]float32, len(ps))
	for i, p := range ps {
		xs[i] = q.s.m.embed(p, q.tokens[p], q.salt(p))
	}
	own := []int{ps[0] / q.s.block}
	for l2 := range l {
		fresh, err := q.access(l2, q.selection(l2, ps), true, span(ps))
		if err != nil {
			return nil, err
		}
		if err := q.restore(l2, fresh, own); err != nil {
			return nil, err
		}
		for i, p := range ps {
			if err := q.s.m.layer(sparseKV{q}, l2, p, xs[i], true); err != nil {
				return nil, err
			}
		}
	}
	return xs, nil
}

// sparseForward runs the tokens at positions ps (those the last Append
// added when write is set; else the last token, rerun for its logits)
// through every layer, a SparseAccess without Keep per layer, and checks
// their logits against the twin's.
func (q *oracleSeq) sparseForward(ps []int, write bool) error {
	m := q.s.m
	xs := make([][]float32, len(ps))
	for i, p := range ps {
		xs[i] = m.embed(p, q.tokens[p], q.salt(p))
	}
	var own []int
	if write {
		// The appended blocks are pinned by the Append; their units
		// are written by this pass.
		own = q.sp.appended
	}
	for l := range m.layers {
		fresh, err := q.access(l, q.selection(l, ps), false, span(ps))
		if err != nil {
			return err
		}
		if err := q.restore(l, fresh, own); err != nil {
			return err
		}
		for i, p := range ps {
			if err := m.layer(sparseKV{q}, l, p, xs[i], write); err != nil {
				return err
			}
		}
	}
	for i, p := range ps {
		if err := q.check(p, m.logits(xs[i])); err != nil {
			return err
		}
	}
	return nil
}

// sparseKV is the sparse sequence's K/V on the GPU. It reads a unit only
// when the cache pins it for the step (its last Append's blocks, or a
// SparseAccess since the last one without Keep) and the block table
// gives it, and a restored unit only at offsets written since; it writes
// the appended tokens and restored units, and checks any other K/V it is
// given (a recomputed token) against the unit's bytes.
type sparseKV struct{ q *oracleSeq }

func (k sparseKV) read(l, h, p int) ([]float32, []float32, error) {
	q := k.q
	u := q.unitOf(l, h, p)
	if _, ok := q.sp.held[u]; !ok && !slices.Contains(q.sp.appended, u.block) {
		return nil, nil, fmt.Errorf("oracle: seq %d reads position %d (layer %d head %d): unit %+v was not given by the step's SparseAccess calls nor pinned by its Append", q.id, p, l, h, u)
	}
	if mask, ok := q.sp.fresh[u]; ok && mask&(1<<(p%q.s.block)) == 0 {
		return nil, nil, fmt.Errorf("oracle: seq %d reads position %d (layer %d head %d) of restored unit %+v before writing it", q.id, p, l, h, u)
	}
	return q.read(l, h, p)
}

func (k sparseKV) write(l, h, p int, kv, vv []float32) error {
	q := k.q
	u := q.unitOf(l, h, p)
	if mask, ok := q.sp.fresh[u]; ok {
		q.sp.fresh[u] = mask | 1<<(p%q.s.block)
		return q.put(l, h, p, kv, vv)
	}
	if inRanges(q.writable, p) {
		return q.write(l, h, p, kv, vv)
	}
	if _, ok := q.sp.held[u]; !ok {
		return nil // a head whose unit this step does not read
	}
	gk, gv, err := q.read(l, h, p)
	if err != nil {
		return err
	}
	q.s.kvSeen.Add(1)
	if !sameBits(gk, kv) || !sameBits(gv, vv) {
		return q.s.mismatch(fmt.Errorf("oracle: seq %d: recomputing position %d (layer %d head %d) gives K/V other than unit %+v holds", q.id, p, l, h, u))
	}
	return nil
}

// appendSparse appends toks, computes them and returns the logits of the
// last.
func (q *oracleSeq) appendSparse(toks []uint32) ([]float32, error) {
	if err := q.settled(); err != nil {
		return nil, err
	}
	plan, err := q.s.c.Append(q.id, toks...)
	if err != nil {
		return nil, noSpace(fmt.Errorf("Append: %w", err))
	}
	clear(q.sp.held)
	clear(q.sp.fresh)
	clear(q.sp.rewritten)
	n := len(q.tokens)
	q.tokens = append(q.tokens, toks...)
	if want := (kvcache.TokenRange{Start: n, End: len(q.tokens)}); len(plan.Compute) != 1 || plan.Compute[0] != want {
		return nil, fmt.Errorf("oracle: sparse Append of %v planned %v", want, plan.Compute)
	}
	q.writable = append(q.writable[:0], plan.Compute...)
	q.sp.appended = q.sp.appended[:0]
	ps := rangePositions(plan.Compute)
	for _, p := range ps {
		if b := p / q.s.block; !slices.Contains(q.sp.appended, b) {
			q.sp.appended = append(q.sp.appended, b)
		}
	}
	err = q.sparseForward(ps, true)
	q.writable = q.writable[:0]
	if err != nil {
		return nil, err
	}
	return q.logits[len(q.tokens)-1], nil
}

// checkKVSparse compares the K/V of every unit of the sequence with the
// twin's, one layer and block at a time through SparseAccess (restoring
// what it finds dropped), so that a tight GPU still holds what it pins.
func (q *oracleSeq) checkKVSparse() error {
	m := q.s.m
	n := len(q.tokens)
	if n == 0 {
		return nil
	}
	q.twinLogits(n - 1)
	for l := range m.layers {
		for b := range (n + q.s.block - 1) / q.s.block {
			sel := make([][]int, m.kvHeads)
			for h := range sel {
				sel[h] = []int{b}
			}
			fresh, err := q.access(l, sel, false, kvcache.TokenRange{})
			if err != nil {
				return err
			}
			if err := q.restore(l, fresh, nil); err != nil {
				return err
			}
			for h := range m.kvHeads {
				if _, ok := q.sp.held[q.unitOf(l, h, b*q.s.block)]; !ok {
					continue // before a sliding window
				}
				for _, p := range q.blockPositions(b) {
					k, v, err := sparseKV{q}.read(l, h, p)
					if err != nil {
						return err
					}
					q.s.kvSeen.Add(1)
					wk, wv, _ := q.twin.read(l, h, p)
					if !sameBits(k, wk) || !sameBits(v, wv) {
						return q.s.mismatch(fmt.Errorf("oracle: seq %d layer %d head %d position %d: K/V in the cache differ from the no-cache run (unit %+v)", q.id, l, h, p, q.sp.held[q.unitOf(l, h, p)]))
					}
				}
			}
		}
	}
	return nil
}

// serveSparse serves r as a sparse sequence. It appends the rest of the
// prompt a block at a time (a token at a time when the model has sliding
// windows: see the comment in the function), decodes, checks every unit's
// K/V and commits. Of the request's ways of serving it takes the LoRA,
// extra keys and priorities; garbage restores the units a step selects
// dropped, writes noise into them and aborts (a step that failed before
// its kernel ran), which must never be served. The other ways (chunks,
// drafts, forks, load limits) are the dense run's.
func (s *oracleServer) serveSparse(r oracleReq, rng *rand.Rand) ([]uint32, error) {
	req := kvcache.Request{Tokens: r.prompt, Sparse: true, LoRA: r.lora, Extra: r.extra, Priorities: r.priorities}
	plan, err := s.c.Acquire(req)
	if err != nil {
		return nil, noSpace(fmt.Errorf("Acquire: %w", err))
	}
	if plan.Tokens+plan.Pending != len(r.prompt) || plan.Tokens%s.block != 0 {
		_ = s.c.Abort(plan.Seq)
		return nil, fmt.Errorf("oracle: sparse Acquire of %d tokens takes %d and leaves %d pending", len(r.prompt), plan.Tokens, plan.Pending)
	}
	q := s.newSeq(plan.Seq, r.prompt[:plan.Tokens])
	q.lora, q.extra = r.lora, r.extra
	q.initSparse()
	out, err := q.runSparse(r, r.prompt[plan.Tokens:], rng)
	if err != nil {
		_ = s.c.Abort(q.id)
		return nil, err
	}
	return out, nil
}

func (q *oracleSeq) runSparse(r oracleReq, rest []uint32, rng *rand.Rand) ([]uint32, error) {
	s := q.s
	var logits []float32
	for len(rest) > 0 {
		k := s.block - len(q.tokens)%s.block
		var err error
		if logits, err = q.appendSparse(rest[:min(k, len(rest))]); err != nil {
			return nil, err
		}
		rest = rest[min(k, len(rest)):]
	}
	if len(q.tokens) == 0 {
		return nil, nil
	}
	if logits == nil {
		// The whole prompt was cached: rerun its last token over the
		// stored K/V for the logits to sample from.
		if err := q.sparseForward([]int{len(q.tokens) - 1}, false); err != nil {
			return nil, err
		}
		logits = q.logits[len(q.tokens)-1]
	}
	for g := range r.gen {
		if r.garbage && g == r.gen/2 {
			return nil, q.abandonSparse(argmax(logits), rng)
		}
		var err error
		if logits, err = q.appendSparse([]uint32{argmax(logits)}); err != nil {
			return nil, err
		}
	}
	if err := q.checkKVSparse(); err != nil {
		return nil, err
	}
	if err := q.settled(); err != nil {
		return nil, err
	}
	return q.finishRequest()
}

// abandonSparse appends tok, selects every block in the last layer, writes
// noise into every unit that restores and aborts the sequence: the cache
// must drop those units again.
func (q *oracleSeq) abandonSparse(tok uint32, rng *rand.Rand) error {
	s := q.s
	if _, err := s.c.Append(q.id, tok); err != nil {
		return noSpace(fmt.Errorf("Append: %w", err))
	}
	clear(q.sp.held)
	clear(q.sp.fresh)
	q.tokens = append(q.tokens, tok)
	l := s.m.layers - 1
	fresh, err := q.access(l, q.selection(l, []int{len(q.tokens) - 1}), false, kvcache.TokenRange{})
	if err != nil {
		return err
	}
	kd, vd := s.m.storedDims()
	noise := make([]float32, kd)
	for _, u := range fresh {
		for h := range s.m.kvHeads {
			for _, p := range q.blockPositions(u.block) {
				if q.unitOf(l, h, p) != u {
					continue
				}
				for i := range noise {
					noise[i] = rng.Float32()*8 - 4
				}
				if err := q.put(l, h, p, noise, noise[:vd:vd]); err != nil {
					return err
				}
			}
		}
	}
	return s.c.Abort(q.id)
}

// TestOracleSparseCatchesOneCorruptLoad is the sensitivity check of the
// sparse path: one bit flipped in a single unit that a SparseAccess
// onboards (a sparse sequence loads nothing any other way) makes some
// output differ from the no-cache run. The sequence that onboarded the
// unit reads it in that step, and its last check reads it again, unless
// the unit was dropped and restored (rewritten) in between.
func TestOracleSparseCatchesOneCorruptLoad(t *testing.T) {
	var cfg oracleConfig
	for _, c := range oracleConfigs() {
		if c.name == "bsa-sparse-lru" {
			cfg = c
		}
	}
	if !cfg.sparse {
		t.Fatal("configuration bsa-sparse-lru not found (renamed?)")
	}
	nths := []int{3, 60, 250}
	if testing.Short() || oracleRace {
		nths = nths[1:2] // one load is enough to see a miss
	}
	for _, nth := range nths {
		t.Run(fmt.Sprint(nth), func(t *testing.T) {
			var mover *corruptingMover
			s, done := newOracle(t, cfg, 1, func(mem *kvcache.MemoryStore) kvcache.Mover {
				mover = &corruptingMover{mem: mem, n: nth, once: true}
				return mover
			})
			defer done()
			s.tolerate = true
			runOracle(t, s, 1, 24)
			if mover.corrupts != 1 || s.sparseOnboards.Load() < int64(nth) {
				t.Fatalf("%d loads corrupted, %d units onboarded by SparseAccess: want the %dth onboard corrupted", mover.corrupts, s.sparseOnboards.Load(), nth)
			}
			if s.mismatches.Load() == 0 {
				t.Fatalf("the %dth unit onboarded was corrupted, and every output matched the no-cache run: the oracle misses corruption on the sparse path", nth)
			}
			t.Logf("one corrupted onboard: %d mismatches in %d logits and %d K/V vectors", s.mismatches.Load(), s.logitsSeen.Load(), s.kvSeen.Load())
		})
	}
}

// span is the range of positions ps, which are consecutive.
func span(ps []int) kvcache.TokenRange {
	return kvcache.TokenRange{Start: ps[0], End: ps[len(ps)-1] + 1}
}
