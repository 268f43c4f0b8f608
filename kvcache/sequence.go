package kvcache

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/radix"
)

// SeqID names a sequence returned by Acquire or Fork. Ids are never reused
// by a Cache.
type SeqID uint64

// Request describes a sequence to Acquire: its prompt and what decides
// whether it may share KV with others.
type Request struct {
	// Tokens is the prompt. It may be empty (a sequence that starts empty
	// and grows by Append). The cache copies it.
	Tokens []uint32
	// Namespace isolates tenants (vLLM's cache_salt): sequences in
	// different namespaces never share a unit.
	Namespace string
	// LoRA names the adapter the KV is computed with; empty for the base
	// model. Sequences with different LoRA never share a unit.
	LoRA string
	// Extra holds other keys the KV depends on (multimodal item hashes),
	// sorted by position; see radix.ExtraKey. The cache copies it.
	Extra []radix.ExtraKey
	// Priorities sets the retention priority of the sequence's blocks; nil
	// means eviction.DefaultPriority for every block, with no time limit.
	Priorities *Priorities
	// Sparse marks a block-sparse (BSA, MoBA) sequence: it keeps its blocks
	// referenced but pins on the GPU only the blocks its last Append wrote;
	// SparseAccess brings the blocks a step selects onto the GPU. Acquire of
	// a sparse request takes only the cached prefix (see Plan.Pending).
	Sparse bool
	// MaxTokens, when positive, is the most tokens the sequence is
	// expected to hold: its prompt and the tokens it will decode (the
	// request's max_tokens added to its prompt, or the model's context
	// length). Acquire sizes the sequence's block tables for it, so that
	// decoding up to it never grows them. Without it, or past it, the
	// tables move to arrays twice as large a piece per operation (one
	// slice's new array, 64 KiB at 128k tokens, allocated by one Append).
	// It is a hint: a sequence may grow past it. It must not be negative.
	MaxTokens int
	// MaxLoadTokens caps how many tokens of the sequence's loads are in
	// flight at once, with a TransferEngine (vLLM's max_load_tokens): an
	// operation's loads are cut into transfers of at most that many
	// tokens (one block at least), each started when the one before it
	// is done, so that one long prompt does not hold the engine while
	// other requests wait. 0 means no cap; it must not be negative.
	MaxLoadTokens int
	// ComputeLast makes a dense Acquire leave the prompt's last token to
	// compute, as vLLM does: the block that holds it is not reused (it is
	// computed into a private block, merged with the cached one at
	// commit), so Plan.Compute always ends with the last token and the
	// forward pass that computes it gives the logits to sample from. It
	// costs the recompute of at most one block. Without it a prompt
	// cached whole, block-aligned, gets an empty Compute, and the server
	// obtains the last token's logits by running that token's forward
	// pass over the K/V its block tables give, writing nothing (after an
	// Acquire the tables cover every block the prompt's last token reads,
	// in every layer). Admit answers as Acquire would; Prefetch and Adopt
	// ignore it.
	ComputeLast bool
}

// Priorities are retention priorities for a sequence's blocks, in the manner
// of TensorRT-LLM's KV-cache retention config. A unit is inserted into a
// tier's policy with the priority of its block: the highest priority among
// the Ranges that overlap the block's tokens, or Default when none does.
// Priority-aware policies (eviction.PrioritizedLRU) use it; others ignore it.
type Priorities struct {
	// Default is the priority of blocks outside every range, decode blocks
	// included, in [eviction.MinPriority, eviction.MaxPriority].
	Default int
	// DefaultDuration limits how long Default holds once a unit is
	// evictable; 0 means forever.
	DefaultDuration time.Duration
	// Ranges give token ranges their own priority.
	Ranges []PriorityRange
}

// PriorityRange is a priority for the blocks overlapping tokens [Start, End).
type PriorityRange struct {
	Start, End int
	Priority   int
	Duration   time.Duration
}

// validate checks p, naming the bad field.
func (p *Priorities) validate() error {
	if p == nil {
		return nil
	}
	if p.Default < eviction.MinPriority || p.Default > eviction.MaxPriority {
		return fmt.Errorf("%w: priority %d outside [%d, %d]", ErrInvalidRequest, p.Default, eviction.MinPriority, eviction.MaxPriority)
	}
	if p.DefaultDuration < 0 {
		return fmt.Errorf("%w: priority duration %v is negative", ErrInvalidRequest, p.DefaultDuration)
	}
	for i, r := range p.Ranges {
		switch {
		case r.Start < 0 || r.End <= r.Start:
			return fmt.Errorf("%w: priority range %d [%d, %d) is empty or negative", ErrInvalidRequest, i, r.Start, r.End)
		case r.Priority < eviction.MinPriority || r.Priority > eviction.MaxPriority:
			return fmt.Errorf("%w: priority range %d has priority %d outside [%d, %d]", ErrInvalidRequest, i, r.Priority, eviction.MinPriority, eviction.MaxPriority)
		case r.Duration < 0:
			return fmt.Errorf("%w: priority range %d has negative duration %v", ErrInvalidRequest, i, r.Duration)
		}
	}
	return nil
}

// sequence is one live request.
type sequence struct {
	id     SeqID
	keys   radix.Keys
	extra  []radix.ExtraKey
	tokens tokenList
	blocks []int32
	sparse bool
	prio   *Priorities
	// pinLo is, per pool, the first block the sequence pins (see pinSpan):
	// it pins the units of blocks[pinLo[p]:] in pool p.
	pinLo []int32
	// writeFrom is the first token the last Acquire or Append wrote (0
	// after a dense Acquire: the prefill may read every prompt block).
	writeFrom int
	// stepPins holds the units the last SparseAccess pinned.
	stepPins []UnitID
	// firstPrivate is the index of the first full block that may be
	// private (not committed): every full block before it is in the tree.
	firstPrivate int
	// restored holds the units the last SparseAccess restored (dropped
	// units given fresh slots) until the sequence declares them written
	// (commitThrough): ending the sequence before drops them again.
	restored []UnitID
	// promptBlocks is the block count of the prompt given to Acquire (all
	// of it, Plan.Pending included): the sequence's length as far as the
	// position weight of its blocks is concerned (see chunks).
	promptBlocks int
	// tables holds, per slice, the GPU slot of each block's unit that the
	// sequence pins, -1 for the others: its block tables, kept up to date
	// by every operation on the sequence (see syncTables).
	tables seqTables
	// compute and executed back the Compute and Executed of the
	// sequence's plans.
	compute  []TokenRange
	executed []Copy
	// waits lists the unfinished transfers the sequence waits on (see
	// transfers.go and Readiness); failed holds the units of its blocks
	// whose transfers failed since its last Readiness, which reports them;
	// rewrite holds the units whose loads failed that it must write
	// (recompute) and declare written; declaredUpTo is the largest Commit
	// (or implicit commit) it made, kept while a block it covers is still
	// in flight (see undeclare).
	waits        []transferID
	failed       []UnitID
	rewrite      []UnitID
	declaredUpTo int
	// maxLoadTokens is Request.MaxLoadTokens.
	maxLoadTokens int
	// busy says that a long Commit (or the implicit commit of an Append
	// or Fork) is committing the sequence in steps: other calls that
	// change it wait (waitIdle).
	busy bool
}

// priority returns the priority and duration of block i of s.
func (c *Cache) priority(s *sequence, i int) (int, time.Duration) {
	p := s.prio
	if p == nil {
		return eviction.DefaultPriority, 0
	}
	lo, hi := i*c.geom.blockTokens, (i+1)*c.geom.blockTokens
	prio, dur, found := p.Default, p.DefaultDuration, false
	for _, r := range p.Ranges {
		if r.Start < hi && r.End > lo && (!found || r.Priority > prio) {
			prio, dur, found = r.Priority, r.Duration, true
		}
	}
	return prio, dur
}

// chunks returns the Chunks of a block s creates in a call after which s
// holds blocks blocks: the sequence's length in blocks as the cost model's
// position weight (chunk+1)/chunks sees it. It is at least the prompt's
// block count, known at Acquire, so that a sparse prefill fed block by block
// through Append weights its early blocks below its late ones (with the
// count of blocks so far every block would be the last, weight 1), and a
// dense prompt's blocks are weighted against the whole prompt. A block past
// the prompt (decode) counts the blocks up to the end of the call that made
// it: one token at a time, that is index+1, the weight of the latest chunk.
// allocBlock keeps chunks above the block's index.
func (s *sequence) chunks(blocks int) int { return max(s.promptBlocks, blocks) }

// lookup returns live sequence id, or an error wrapping ErrUnknownSequence.
func (c *Cache) lookup(id SeqID) (*sequence, error) {
	s, ok := c.seqs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownSequence, id)
	}
	return s, nil
}

// lookupToChange is lookup for a call that changes the cache: a poisoned
// cache refuses it first, with its poison error (see poison).
func (c *Cache) lookupToChange(id SeqID) (*sequence, error) {
	for {
		if c.poisoned != nil {
			return nil, c.poisoned
		}
		s, err := c.lookup(id)
		if err != nil || !s.busy {
			return s, err
		}
		if err := c.waitIdle(s); err != nil {
			return nil, err
		}
	}
}

// waitIdle waits (Cache.mu held, released meanwhile) until busy sequence s
// is committed (see commitInSteps). A call that the event sink makes
// cannot wait: the commit's own goroutine delivers the events it is
// called with; it gets an error wrapping ErrBusy.
func (c *Cache) waitIdle(s *sequence) error {
	if c.events.delivering.Load() > 0 && inSink() {
		return fmt.Errorf("%w: sequence %d is being committed in steps, by the call whose events the sink is handling", ErrBusy, s.id)
	}
	c.idle.Wait()
	return nil
}

// register gives s an id and makes it live.
func (c *Cache) register(s *sequence) {
	s.id = c.nextSeq
	c.nextSeq++
	c.seqs[s.id] = s
}

// undeclare takes back the writes s declared from token from on: a unit of
// a private block there got a fresh slot that the server writes only now
// (a Truncate or a SparseAccess restored a unit that had lost its slot).
// A commit that waits for a transfer then stops before that block, and the
// server's next Commit or Append declares the block again once written;
// otherwise the waiting commit, retried when the transfer ends, would
// share the unwritten slot as the block's bytes.
func (s *sequence) undeclare(from int) { s.declaredUpTo = min(s.declaredUpTo, from) }
