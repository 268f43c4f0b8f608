package kvcache_test

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/radix"
)

// oracleReq is one request of the oracle's workload: a prompt, the tokens to
// generate and what the server does on the way.
type oracleReq struct {
	prompt []uint32
	gen    int
	// chunk > 0 prefills in chunks of that many tokens, committing each.
	chunk int
	// draft > 0 appends that many draft tokens at once halfway through the
	// decode and then truncates reject tokens (speculative decoding; more
	// than the drafts rolls back further, and -1 goes back to the block
	// boundary before the middle of the sequence).
	draft, reject int
	// fork starts a child halfway through the decode that decodes forkGen
	// tokens of its own.
	fork    bool
	forkGen int
	// garbage writes noise into every position to compute, then aborts:
	// a prefill that failed. Nothing of it may ever be served.
	garbage bool
	// maxLoad is Request.MaxLoadTokens.
	maxLoad int
	// prefetch calls Prefetch before the Acquire.
	prefetch bool
	// computeLast sets Request.ComputeLast.
	computeLast bool
	// priorities is Request.Priorities.
	priorities *kvcache.Priorities
	// lora and extra are Request.LoRA and Request.Extra.
	lora  string
	extra []radix.ExtraKey
}

// errSkipped reports a request the cache had no room for (ErrNoSpace): the
// workload goes on without it.
var errSkipped = errors.New("oracle: skipped, no space")

func noSpace(err error) error {
	if errors.Is(err, kvcache.ErrNoSpace) {
		return errSkipped
	}
	return err
}

// serve runs one request from Acquire to Release and returns its tokens
// (prompt and generated).
func (s *oracleServer) serve(r oracleReq, rng *rand.Rand) ([]uint32, error) {
	if s.sparse {
		return s.serveSparse(r, rng)
	}
	req := kvcache.Request{Tokens: r.prompt, MaxLoadTokens: r.maxLoad, ComputeLast: r.computeLast, LoRA: r.lora, Extra: r.extra, Priorities: r.priorities}
	if s.lookup != nil {
		if err := s.lookup(req); err != nil {
			return nil, fmt.Errorf("Lookup: %w", err)
		}
	}
	if r.prefetch {
		counts, err := s.c.Prefetch(req)
		if err != nil && !errors.Is(err, kvcache.ErrNoSpace) {
			return nil, fmt.Errorf("Prefetch: %w", err)
		}
		if counts.Onboarded > 0 {
			s.covered.prefetched.Add(1)
		}
	}
	plan, err := s.c.Acquire(req)
	if err != nil {
		return nil, noSpace(fmt.Errorf("Acquire: %w", err))
	}
	q := s.newSeq(plan.Seq, r.prompt)
	q.lora, q.extra = r.lora, r.extra
	if r.maxLoad > 0 && plan.Onboarded > r.maxLoad/oracleBlock*s.c.Layout().UnitsPerBlock() {
		s.covered.maxLoadCut.Add(1)
	}
	if n := len(plan.Compute); r.computeLast && len(r.prompt) > 0 && (n == 0 || plan.Compute[n-1].End != len(r.prompt)) {
		_ = s.c.Abort(q.id)
		return nil, fmt.Errorf("oracle: Acquire with ComputeLast planned %v for %d tokens", plan.Compute, len(r.prompt))
	}
	if plan.Tokens != len(r.prompt) {
		_ = s.c.Abort(q.id)
		return nil, fmt.Errorf("oracle: Acquire of %d tokens says %d", len(r.prompt), plan.Tokens)
	}
	if r.garbage {
		// A failed prefill ends by Abort, or by Release as a server
		// that does not tell failures apart would: either way nothing
		// of it was declared written, so nothing of it is shared.
		err := q.writeGarbage(plan.Compute, rng)
		end, count := s.c.Abort, &s.covered.garbageAbort
		if rng.IntN(2) == 0 {
			end, count = s.c.Release, &s.covered.garbageRelease
		}
		if eerr := end(q.id); err == nil {
			err = eerr
		}
		count.Add(1)
		return nil, err
	}
	out, err := q.run(r, plan.Compute, rng)
	if err != nil {
		_ = s.c.Abort(q.id)
		return nil, err
	}
	return out, nil
}

func (q *oracleSeq) run(r oracleReq, compute []kvcache.TokenRange, rng *rand.Rand) ([]uint32, error) {
	s := q.s
	compute = append([]kvcache.TokenRange(nil), compute...) // the plan's buffer is reused
	if r.chunk > 0 {
		// Chunked prefill: a chunk of the positions to compute at a time,
		// each declared written (Commit) once computed.
		q.addPending(compute)
		compute = nil
		for len(q.pending) > 0 {
			if err := q.compute(nil, r.chunk); err != nil {
				return nil, err
			}
			if err := s.c.Commit(q.id, q.written()); err != nil {
				return nil, fmt.Errorf("Commit: %w", err)
			}
		}
	}
	if err := q.compute(compute, 0); err != nil {
		return nil, err
	}
	if len(q.tokens) == 0 {
		return nil, nil
	}
	logits, err := q.lastLogits()
	if err != nil {
		return nil, err
	}
	for g := 0; g < r.gen; g++ {
		if r.draft > 0 && g == r.gen/2 {
			if logits, err = q.speculate(r.draft, r.reject, logits, rng); err != nil {
				return nil, err
			}
		}
		if r.fork && g == r.gen/3 {
			if err := q.fork(r.forkGen); err != nil {
				return nil, err
			}
		}
		if logits, err = q.decode(argmax(logits)); err != nil {
			return nil, err
		}
	}
	if err := q.checkKV(); err != nil {
		return nil, err
	}
	return q.finishRequest()
}

// finishRequest shares what the request computed (Commit of every token)
// and ends it (Release), returning its tokens.
func (q *oracleSeq) finishRequest() ([]uint32, error) {
	if err := q.s.c.Commit(q.id, len(q.tokens)); err != nil {
		return nil, fmt.Errorf("Commit: %w", err)
	}
	if err := q.s.c.Release(q.id); err != nil {
		return nil, fmt.Errorf("Release: %w", err)
	}
	return q.tokens, nil
}

// decode appends tok, computes it and returns its logits.
func (q *oracleSeq) decode(tok uint32) ([]float32, error) {
	plan, err := q.s.c.Append(q.id, tok)
	if err != nil {
		return nil, noSpace(fmt.Errorf("Append: %w", err))
	}
	q.declared()
	q.tokens = append(q.tokens, tok)
	if plan.Tokens != len(q.tokens) {
		return nil, fmt.Errorf("oracle: Append to %d tokens says %d", len(q.tokens), plan.Tokens)
	}
	if err := q.compute(plan.Compute, 0); err != nil {
		return nil, err
	}
	p := len(q.tokens) - 1
	if p >= len(q.logits) || q.logits[p] == nil {
		return nil, fmt.Errorf("oracle: Append of position %d planned %v, not the new token", p, plan.Compute)
	}
	return q.logits[p], nil
}

// speculate appends n draft tokens in one call (a draft model's guesses),
// computes them, then truncates the last reject of them as a verifier would,
// and returns the logits of the last token kept, rerun over the K/V the
// tables give after the Truncate (and compared with the pass that
// computed them).
func (q *oracleSeq) speculate(n, reject int, logits []float32, rng *rand.Rand) ([]float32, error) {
	drafts := make([]uint32, n)
	drafts[0] = argmax(logits)
	for i := 1; i < n; i++ {
		drafts[i] = uint32(rng.IntN(q.s.m.vocab))
	}
	plan, err := q.s.c.Append(q.id, drafts...)
	if err != nil {
		return nil, noSpace(fmt.Errorf("Append: %w", err))
	}
	q.declared()
	q.tokens = append(q.tokens, drafts...)
	if err := q.compute(plan.Compute, 0); err != nil {
		return nil, err
	}
	if reject < 0 {
		// Back to the block boundary before the middle.
		reject = len(q.tokens) - len(q.tokens)/2/oracleBlock*oracleBlock
	}
	reject = min(reject, len(q.tokens)-1)
	plan, err = q.s.c.Truncate(q.id, reject)
	if err != nil {
		return nil, noSpace(fmt.Errorf("Truncate: %w", err))
	}
	q.coverTruncate(n, reject, plan)
	q.cut(len(q.tokens) - reject)
	if plan.Tokens != len(q.tokens) {
		return nil, fmt.Errorf("oracle: Truncate to %d tokens says %d", len(q.tokens), plan.Tokens)
	}
	if err := q.compute(plan.Compute, 0); err != nil {
		return nil, fmt.Errorf("after Truncate(%d): %w", reject, err)
	}
	// The logits of the last kept token are known from the pass that
	// computed it; rerunning it checks that the tables still cover its
	// window.
	return q.rerunLast()
}

// coverTruncate counts the kinds of a Truncate of reject tokens after n
// drafts, which left plan.
func (q *oracleSeq) coverTruncate(n, reject int, plan kvcache.Plan) {
	c := &q.s.covered
	switch {
	case reject == 0:
		c.truncNone.Add(1)
		return
	case reject <= n:
		c.truncDrafts.Add(1)
	default:
		c.truncPastDrafts.Add(1)
	}
	if plan.Tokens < q.prompt {
		c.truncIntoPrompt.Add(1)
	}
	if plan.Tokens%oracleBlock == 0 {
		c.truncBoundary.Add(1)
	}
	if plan.Copied > 0 {
		c.truncCopy.Add(1)
	}
	if len(plan.Compute) > 0 {
		c.truncRecompute.Add(1)
	}
}

// fork starts a child of the sequence, decodes gen tokens in it, checks its
// K/V and releases it.
func (q *oracleSeq) fork(gen int) error {
	plan, err := q.s.c.Fork(q.id)
	if err != nil {
		if errors.Is(err, kvcache.ErrBusy) {
			return nil
		}
		return noSpace(fmt.Errorf("Fork: %w", err))
	}
	child := q.s.newSeq(plan.Seq, q.tokens)
	child.lora, child.extra = q.lora, q.extra
	child.logits = append(child.logits, q.logits...)
	if err := child.compute(plan.Compute, 0); err != nil {
		_ = q.s.c.Abort(child.id)
		return err
	}
	logits, err := child.lastLogits()
	for g := 0; g < gen && err == nil; g++ {
		logits, err = child.decode((argmax(logits) + 1) % uint32(q.s.m.vocab)) // differ from the parent
	}
	if err == nil {
		err = child.checkKV()
	}
	if err != nil {
		_ = q.s.c.Abort(child.id)
		return fmt.Errorf("fork: %w", err)
	}
	if err := q.s.c.Commit(child.id, len(child.tokens)); err != nil {
		return fmt.Errorf("Commit of a fork: %w", err)
	}
	return q.s.c.Release(child.id)
}

// writeGarbage writes noise into every position of rs, as a prefill that
// failed halfway might leave its slots.
func (q *oracleSeq) writeGarbage(rs []kvcache.TokenRange, rng *rand.Rand) error {
	q.writable = appendRanges(q.writable, rs...)
	if _, err := q.wait(-1); err != nil {
		return err
	}
	if err := q.refresh(); err != nil {
		return err
	}
	kd, vd := q.s.m.storedDims()
	noise := make([]float32, kd)
	for _, p := range rangePositions(rs) {
		for l := range q.s.m.layers {
			for h := range q.s.m.kvHeads {
				for i := range noise {
					noise[i] = rng.Float32()*8 - 4
				}
				if err := q.write(l, h, p, noise, noise[:vd:vd]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
