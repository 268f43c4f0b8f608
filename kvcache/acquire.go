package kvcache

import (
	"errors"
	"fmt"
	"slices"

	"github.com/kvtier/kvtier/radix"
)

// Acquire starts a sequence for req and returns its plan.
//
// A dense request takes its whole prompt: the longest cached prefix is
// matched (whole blocks, same namespace, LoRA and extra keys), and every
// unit of every prompt block is pinned on the GPU (hits stay, units on a
// lower tier are copied back, dropped or missing units get fresh slots).
// The Plan's Compute lists the tokens to compute: uncached ones, and cached
// blocks a unit of which was dropped (their tokens are recomputed, while
// later blocks may still hit, as in Pensieve). A recomputed block's units
// on a lower tier are not copied back, since the recompute would overwrite
// them: they get fresh slots and their copies are released (counted in
// Computed; events moving them to Dropped, then to the GPU); its units
// already on the GPU stay pinned where they are (Hits): the recompute
// writes the same bytes into them. The blocks the server computes stay
// private to the sequence until it declares them written (Commit, or the
// sequence's next Append): nobody else reads KV that may not exist yet.
//
// A sparse request (req.Sparse) takes only the cached prefix of full blocks
// whose units all hold bytes (on any tier), without pinning any:
// SparseAccess brings them to the GPU when a step selects them. The rest of
// the prompt (Plan.Pending tokens) is the server's to Append, block by block,
// so the GPU need not hold the whole context.
//
// With a TransferEngine, Acquire returns once the copies are planned and
// started: the Plan's units are the sequence's, but the loaded ones are
// not readable until Readiness says so (Plan.Loading counts them). Wait
// before writing, too: a fresh slot may still be the source of a victim's
// move down to a lower tier, which Plan.Loading also counts; the server
// computes a layer once Readiness reports it (WaitReady), and recomputes
// what Readiness.Recompute lists.
//
// An empty Plan.Compute means the whole prompt was cached. The logits the
// server samples the first new token from are then those of the prompt's
// last token: it reruns that token's forward pass over the K/V the block
// tables give (they cover every block it reads), writing nothing, or it
// sets Request.ComputeLast so that the plan computes the last token.
//
// Acquire returns an error wrapping ErrInvalidRequest for bad priorities,
// extra keys, MaxTokens or MaxLoadTokens, ErrNoSpace when the GPU cannot
// supply the slots (everything else pinned, or held by transfers still in
// flight; with a TransferEngine, Acquire first applies what the engine
// finished, in steps, before it gives up) and ErrCopyFailed when the Mover failed; the cache is then
// unchanged, except after a failure past the first step of an Acquire
// that runs in steps (see Long operations in the package doc): the
// Acquire is then undone as an Abort would undo it, its pins and
// references released, but what its earlier steps moved stays moved. A
// policy that broke its contract makes it fail with ErrPolicy.
func (c *Cache) Acquire(req Request) (Plan, error) {
	p, err := c.acquire(req)
	// Finished transfers are applied a step's worth per call (see
	// applyFinished): the slots the rest hold are not free yet. Apply
	// them a step at a time, each in a hold of its own, and try again.
	for errors.Is(err, ErrNoSpace) && c.applyStep() {
		p, err = c.acquire(req)
	}
	return p, err
}

// acquire is Acquire, without waiting for finished transfers.
func (c *Cache) acquire(req Request) (_ Plan, err error) {
	if err := req.Priorities.validate(); err != nil {
		return Plan{}, err
	}
	if req.MaxLoadTokens < 0 {
		return Plan{}, fmt.Errorf("%w: MaxLoadTokens %d is negative", ErrInvalidRequest, req.MaxLoadTokens)
	}
	if req.MaxTokens < 0 {
		return Plan{}, fmt.Errorf("%w: MaxTokens %d is negative", ErrInvalidRequest, req.MaxTokens)
	}
	if !req.Sparse && c.isLong(c.geom.numBlocks(len(req.Tokens))*c.geom.slices) {
		return c.acquireLong(req)
	}
	if err := c.lock("Acquire"); err != nil {
		return Plan{}, err
	}
	defer c.unlock(&err)
	c.applyFinished()
	if c.poisoned != nil {
		return Plan{}, c.poisoned
	}
	keys, nodes, src, partial, err := c.matchPrompt(&req)
	if err != nil {
		return Plan{}, err
	}
	s := &sequence{
		keys:   keys,
		extra:  slices.Clone(req.Extra),
		sparse: req.Sparse,

		maxLoadTokens: req.MaxLoadTokens,
	}
	if req.Priorities != nil {
		p := *req.Priorities
		p.Ranges = slices.Clone(p.Ranges)
		s.prio = &p
	}
	s.promptBlocks = c.geom.numBlocks(len(req.Tokens))
	if req.MaxTokens > len(req.Tokens) {
		s.tables.reserve(c.geom.slices, c.geom.numBlocks(req.MaxTokens))
	}
	c.begin(nil)
	c.tx.owner = s
	if req.Sparse {
		return c.acquireSparse(s, req.Tokens, nodes), nil
	}
	p, err := c.acquireDense(s, req.Tokens, nodes, src, partial)
	if src >= 0 && errors.Is(err, ErrNoSpace) {
		// The copy pins its source while it runs: without room for that,
		// the block is computed whole. The rollback undid the planning;
		// match again, since it may have collected what it referenced.
		if _, nodes, _, _, err = c.matchPrompt(&req); err != nil {
			return Plan{}, err
		}
		c.begin(nil)
		c.tx.owner = s
		p, err = c.acquireDense(s, req.Tokens, nodes, -1, 0)
	}
	return p, err
}

func (c *Cache) acquireSparse(s *sequence, tokens []uint32, nodes []*radix.Node[int32]) Plan {
	k := c.wholePrefix(nodes)
	writing := c.beingWritten(c.matchState(s.keys, nodes[:k]), tokens, s.extra, k)
	s.tokens = newTokenList(c.geom.blockTokens)
	s.tokens.append(tokens[:k*c.geom.blockTokens]...)
	s.blocks = make([]int32, k)
	for i, n := range nodes[:k] {
		s.blocks[i] = n.Value
		c.ref(n.Value, true)
	}
	s.writeFrom = s.tokens.len()
	s.firstPrivate = k
	s.pinLo = c.wantLo(nil, true, s.writeFrom)
	c.register(s)
	c.syncTables(s)
	return Plan{Seq: s.id, Tokens: s.tokens.len(), Pending: len(tokens) - s.tokens.len(), ReusedTokens: s.tokens.len(),
		BeingWrittenTokens: writing}
}

// acquireDense takes the whole prompt of s, whose cached prefix is nodes.
// When src is not -1, the first block past them is filled by copying
// src, whose first partial tokens it agrees with (see partial.go).
func (c *Cache) acquireDense(s *sequence, tokens []uint32, nodes []*radix.Node[int32], src int32, partial int) (Plan, error) {
	B := c.geom.blockTokens
	nb := c.geom.numBlocks(len(tokens))
	matched := len(nodes)
	writing := c.beingWritten(c.matchState(s.keys, nodes), tokens, s.extra, matched)
	blocks := make([]int32, 0, nb)
	s.firstPrivate = matched
	for i, n := range nodes {
		// Referenced before the transaction runs so that no collection
		// during it can forget a matched block; a recomputed block keeps
		// the reference as its copy's twin.
		c.ref(n.Value, false)
		if !c.whole(n.Value) {
			// A dense Acquire pins every unit of every prompt block: a
			// block with a dropped unit is recomputed whole, into a
			// private copy that its commit merges back.
			blocks = append(blocks, c.recomputeCopy(n.Value, false))
			s.firstPrivate = min(s.firstPrivate, i)
			continue
		}
		blocks = append(blocks, n.Value)
	}
	for i := matched; i < nb; i++ {
		prio, dur := c.priority(s, i)
		b := c.newBlock(i, s.chunks(nb), prio, dur, s.keys.Namespace)
		c.ref(b, false)
		blocks = append(blocks, b)
	}
	s.blocks = blocks
	s.pinLo = c.wantLo(nil, false, 0)
	cow := int32(-1)
	if src >= 0 {
		cow = blocks[matched]
	}
	c.queuePins(pinSpan{}, s.span(), 0, cow, src)
	if err := c.execute(); err != nil {
		return Plan{}, err
	}
	if cow >= 0 && slices.Contains(c.scratch.fresh, matched) {
		partial = 0 // a unit of src had no bytes: computed whole
	}
	s.tokens = newTokenList(c.geom.blockTokens)
	s.tokens.append(tokens...)
	c.register(s)
	plan := Plan{Seq: s.id, Tokens: len(tokens), BeingWrittenTokens: writing}
	c.fillPlan(&plan, s)
	compute, recomputed := c.computeRanges(s, len(tokens), matched)
	// The blocks past the matched prefix are computed from the first
	// token a partial copy does not give.
	compute = addRange(cutRanges(compute, matched*B), matched*B+partial, len(tokens))
	s.compute = compute
	plan.Compute, plan.RecomputeTokens, plan.PartialTokens = compute, recomputed, partial
	c.st.partial += int64(partial)
	plan.ReusedTokens = len(tokens)
	for _, r := range compute {
		plan.ReusedTokens -= r.Len()
	}
	c.countLookups()
	c.st.recomputed += int64(plan.RecomputeTokens)
	c.syncTables(s)
	// The new full blocks stay private until the server commits them.
	c.indexWriting(s, matched)
	return plan, nil
}
