package kvcache

import (
	"fmt"
	"slices"

	"github.com/kvtier/kvtier/radix"
)

// Acquire starts a sequence for req and returns its plan.
//
// A dense request takes its whole prompt: the longest cached prefix is
// matched (whole blocks, same namespace, LoRA and extra keys), every unit of
// every prompt block is pinned on the GPU (hits stay, CPU units are copied
// back, dropped or missing units get fresh slots), and the prompt's full
// blocks are committed to the prefix tree at once, so another request can
// reuse them immediately (the server computes them in the same step, as in
// vLLM: a forward pass writes a layer's KV before attention reads it). The
// Plan's Compute lists the tokens to compute: uncached ones, and cached
// blocks a unit of which was dropped (their tokens are recomputed, while
// later blocks may still hit, as in Pensieve). A recomputed block's units
// on the CPU are not copied back, since the recompute would overwrite them:
// they get fresh slots and their CPU copies are released (Plan.FreshUnits;
// events UnitDropped then UnitRestored). Its units already on the GPU stay
// pinned where they are (Plan.HitUnits): the recompute writes the same
// bytes into them.
//
// A sparse request (req.Sparse) takes only the cached prefix of full blocks
// whose units all hold bytes (on the GPU or the CPU), without pinning any:
// SparseAccess brings them to the GPU when a step selects them. The rest of
// the prompt (Plan.Pending tokens) is the server's to Append, block by block,
// so the GPU need not hold the whole context.
//
// Acquire returns an error wrapping ErrInvalidRequest for bad priorities or
// extra keys, ErrNoSpace when the GPU cannot supply the slots (everything
// else pinned) and ErrCopyFailed when the Mover failed; the cache is then
// unchanged. A policy that broke its contract makes it fail with ErrPolicy.
func (c *Cache) Acquire(req Request) (_ Plan, err error) {
	if err := req.Priorities.validate(); err != nil {
		return Plan{}, err
	}
	if err := c.lock("Acquire"); err != nil {
		return Plan{}, err
	}
	defer c.unlock(&err)
	if c.poisoned != nil {
		return Plan{}, c.poisoned
	}
	keys := radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}
	nodes, err := c.tree.Match(c.scratch.nodes[:0], keys, req.Tokens, req.Extra)
	c.scratch.nodes = nodes[:0]
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	s := &sequence{
		keys:   keys,
		extra:  slices.Clone(req.Extra),
		sparse: req.Sparse,
	}
	if req.Priorities != nil {
		p := *req.Priorities
		p.Ranges = slices.Clone(p.Ranges)
		s.prio = &p
	}
	s.promptBlocks = c.numBlocks(len(req.Tokens))
	if req.Sparse {
		return c.acquireSparse(s, req.Tokens, nodes), nil
	}
	return c.acquireDense(s, req.Tokens, nodes)
}

func (c *Cache) acquireSparse(s *sequence, tokens []uint32, nodes []*radix.Node[int32]) Plan {
	k := 0
	for _, n := range nodes {
		if c.blocks[n.Value].held != int32(c.numSlices) {
			break
		}
		k++
	}
	writing := c.beingWritten(c.matchState(s.keys, nodes[:k]), tokens, s.extra, k)
	s.tokens = slices.Clone(tokens[:k*c.blockTokens])
	s.blocks = make([]int32, k)
	for i, n := range nodes[:k] {
		s.blocks[i] = n.Value
		c.addRef(n.Value, true)
	}
	s.writeFrom = len(s.tokens)
	s.firstPrivate = k
	s.pinLo = c.wantLo(nil, s)
	s.pinHi = k
	c.register(s)
	return Plan{Seq: s.id, Tokens: len(s.tokens), Pending: len(tokens) - len(s.tokens), ReusedTokens: len(s.tokens),
		BeingWrittenTokens: writing}
}

func (c *Cache) acquireDense(s *sequence, tokens []uint32, nodes []*radix.Node[int32]) (Plan, error) {
	B := c.blockTokens
	nb := c.numBlocks(len(tokens))
	matched := len(nodes)
	writing := c.beingWritten(c.matchState(s.keys, nodes), tokens, s.extra, matched)
	blocks := make([]int32, 0, nb)
	s.firstPrivate = matched
	for i, n := range nodes {
		// Referenced before the transaction so that no collection during
		// it can forget a matched block; a recomputed block keeps the
		// reference as its copy's twin.
		c.addRef(n.Value, false)
		if c.lacksBytes(n.Value, nil) {
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
		b := c.allocBlock(i, s.chunks(nb), prio, dur)
		c.addRef(b, false)
		blocks = append(blocks, b)
	}
	s.writeFrom = 0
	lo := c.wantLo(nil, s)
	c.tx.reset()
	c.queuePinDiff(nil, nil, 0, blocks, lo, nb, -1, -1)
	if err := c.runTxn(); err != nil {
		for i, b := range blocks {
			if c.blocks[b].node == nil {
				c.dropNew(b)
			}
			if i < matched {
				c.unref(nodes[i].Value, false) // a recompute copy's twin too
			}
		}
		return Plan{}, err
	}
	var plan Plan
	c.fillPlan(&plan)
	for _, i := range c.scratch.fresh {
		end := min((i+1)*B, len(tokens))
		plan.Compute = addRange(plan.Compute, i*B, end)
		if i < matched {
			plan.RecomputeTokens += end - i*B
		}
	}
	plan.Compute = addRange(plan.Compute, matched*B, len(tokens))
	plan.ReusedTokens = len(tokens)
	for _, r := range plan.Compute {
		plan.ReusedTokens -= r.Len()
	}
	plan.BeingWrittenTokens = writing
	c.countAccess()
	c.st.recomputed += int64(plan.RecomputeTokens)

	s.tokens = slices.Clone(tokens)
	s.blocks = blocks
	s.pinLo = lo
	s.pinHi = nb
	// The new full blocks stay private until the server commits them.
	c.indexWriting(s, matched)
	c.register(s)
	c.collectPending()
	plan.Seq = s.id
	plan.Tokens = len(tokens)
	return plan, nil
}

// register gives s an id and makes it live.
func (c *Cache) register(s *sequence) {
	s.id = c.nextSeq
	c.nextSeq++
	c.seqs[s.id] = s
}

// countAccess adds the committed transaction's needs to the hit and miss
// counters of their pools, and reports each hit to the GPU policy (Access):
// pinning is not a use for every policy (S3-FIFO counts hits in Access
// only). Policies known to ignore it are skipped (see tellsHits).
func (c *Cache) countAccess() {
	for i := range c.tx.needs {
		n := &c.tx.needs[i]
		p := c.poolOfUnit(n.u)
		switch n.act {
		case actHit:
			c.gpu[p].hits++
			if a := c.gpu[p]; a.tellHits {
				a.policyAccess(n.u)
			}
		case actOnboard:
			c.gpu[p].misses++
			c.cpu[p].hits++
		case actFresh, actRecompute:
			// A CPU copy given up because its block is recomputed
			// served nothing: a CPU miss (see TierStats).
			c.gpu[p].misses++
			c.cpu[p].misses++
		}
	}
}
