package kvcache

import (
	"cmp"
	"slices"
)

// chain is the copies and moves that make one need's slot ready, in the
// running transaction's batch and moves.
type chain struct {
	copyStart, copyEnd int32
	moveStart, moveEnd int32
	kvLayer            int32
	// block is the need's block record; load says whether the chain
	// brings bytes to it (a load or a copy, not a fresh unit).
	block int32
	load  bool
	// after is the transfer that writes what the chain reads (0: none).
	after transferID
}

// recordMove notes a move of the transaction (when it records moves: with
// an engine). Its copy, if it has one, is the next one appended to the
// batch.
func (t *txn) recordMove(m move) {
	if t.recordsMoves {
		m.copy = int32(len(t.batch))
		if m.kind == moveVacate {
			m.copy = -1
		}
		t.moves = append(t.moves, m)
	}
}

// addChain records the chain that makes need n's slot ready: the copies
// and moves from copyStart and moveStart on, in KV layer kvLayer (n's),
// after the transfer that writes its source when that is still in flight.
func (t *txn) addChain(units *unitTable, n *need, kvLayer int32, copyStart, moveStart int) {
	ch := chain{copyStart: int32(copyStart), copyEnd: int32(len(t.batch)), moveStart: int32(moveStart), moveEnd: int32(len(t.moves)),
		kvLayer: kvLayer, block: units.block(n.u)}
	switch n.act {
	case actOnboard:
		ch.load = true
		ch.after = units.of(n.u).storeBy
	case actCopy:
		ch.load = true
		switch st := units.of(n.src); {
		case st.storeBy != 0:
			ch.after = st.storeBy
		case st.loadBy != 0:
			ch.after = st.loadBy
		}
	}
	t.chains = append(t.chains, ch)
}

// xferBuild turns the chains of an operation's transactions into
// transfers: one per KV layer (and dependency), cut into pieces of at most
// the owner's MaxLoadTokens of loads, each started after the one before.
// An operation of one transaction builds and starts them at once (submit);
// an operation planned in slices (see slices.go) keeps each layer's
// transfer open across its transactions, so that a long prompt still makes
// one transfer per layer, and starts them when it is planned (startBuilt).
// An open transfer is a transfer in flight like any other (its units are
// marked, other operations wait on it or depend on it); it is only not
// handed to the engine yet.
type xferBuild struct {
	owner     *sequence
	capBlocks int
	// open is, per KV layer (index kvLayer+1), the transfer that takes
	// the layer's chains that depend on no other transfer, with the
	// loads (blocks) it carries and its last loaded block.
	open []openXfer
	// prev is the last transfer made: MaxLoadTokens chains each new one
	// after it.
	prev *transfer
	// made lists the transfers made, started by startBuilt.
	made []transferID
	// loading counts the owner's needs in flight (Plan.Loading).
	loading int
	// hint is, per KV layer (index kvLayer+1), how many copies a long
	// operation expects its transfer of the layer to take: the transfer
	// is sized for them when made, so that it does not grow by copying
	// what it holds (nil: no hint).
	hint []int
}

// openXfer is the open transfer of one KV layer in an xferBuild.
type openXfer struct {
	tr        *transfer
	loads     int
	lastBlock int32
}

// reset empties b for an operation owned by s (nil: none), keeping its
// buffers.
func (b *xferBuild) reset(kvLayers, blockTokens int, s *sequence) {
	clear(b.open)
	b.open = b.open[:0]
	for range kvLayers + 1 {
		b.open = append(b.open, openXfer{lastBlock: -1})
	}
	b.owner, b.prev, b.loading, b.hint = s, nil, 0, nil
	b.capBlocks = 0
	if s != nil && s.maxLoadTokens > 0 {
		b.capBlocks = max(1, s.maxLoadTokens/blockTokens)
	}
	b.made = b.made[:0]
}

// newBuilt makes a transfer of KV layer kvLayer for b, one of
// transaction t's, after the one before it under MaxLoadTokens, with b's
// owner waiting on it.
func (x *transfers) newBuilt(b *xferBuild, t *txn, kvLayer int32) *transfer {
	tr := x.add(kvLayer)
	tr.building = true
	t.submitted = append(t.submitted, tr.id)
	if b.hint != nil && b.capBlocks == 0 {
		if n := b.hint[kvLayer+1]; n > 0 {
			tr.copies = make([]Copy, 0, n)
			tr.moves = make([]move, 0, n)
		}
	}
	if b.capBlocks > 0 && b.prev != nil {
		x.addDep(tr, b.prev.id, false)
	}
	b.prev = tr
	b.made = append(b.made, tr.id)
	if b.owner != nil {
		x.wait(b.owner, tr.id)
	}
	return tr
}

// addChains adds committed transaction t's chains to b's transfers (see
// xferBuild), marks their units in flight in the unit table, and
// registers b's owner as waiting on the transfers that bring the units it
// hit.
func (x *transfers) addChains(b *xferBuild, t *txn, units *unitTable) {
	x.sortChains(t.chains)
	// after is the transfer of the current run of chains that read what
	// another transfer writes, with its loads and last loaded block.
	var after *transfer
	var afterID transferID
	afterLoads, afterLast := 0, int32(-1)
	for _, ch := range x.sorted {
		var cur *transfer
		if ch.after == 0 {
			o := &b.open[ch.kvLayer+1]
			if o.tr == nil || (b.capBlocks > 0 && ch.load && ch.block != o.lastBlock && o.loads == b.capBlocks) {
				o.tr, o.loads, o.lastBlock = x.newBuilt(b, t, ch.kvLayer), 0, -1
			}
			if ch.load && ch.block != o.lastBlock {
				o.loads++
				o.lastBlock = ch.block
			}
			cur = o.tr
		} else {
			if after == nil || after.kvLayer != ch.kvLayer || afterID != ch.after ||
				(b.capBlocks > 0 && ch.load && ch.block != afterLast && afterLoads == b.capBlocks) {
				after, afterID, afterLoads, afterLast = x.newBuilt(b, t, ch.kvLayer), ch.after, 0, -1
				x.addDep(after, ch.after, true)
			}
			if ch.load && ch.block != afterLast {
				afterLoads++
				afterLast = ch.block
			}
			cur = after
		}
		base := int32(len(cur.copies)) - ch.copyStart
		cur.copies = append(cur.copies, t.batch[ch.copyStart:ch.copyEnd]...)
		for _, m := range t.moves[ch.moveStart:ch.moveEnd] {
			if m.copy >= 0 {
				m.copy += base
			}
			cur.moves = append(cur.moves, m)
			switch m.kind {
			case moveDown:
				units.of(m.u).storeBy = cur.id
			default:
				units.of(m.u).loadBy = cur.id
				b.loading++
			}
		}
	}
	// A copy-on-write whose source this operation loads reads what that
	// load writes: it waits for it, and fails with it. (Its chain's
	// after could not name the load: loadBy is set above.) Only the
	// operations of one transaction copy on write, so their transfers are
	// the transaction's own.
	for _, id := range t.submitted {
		tr := x.byID[id]
		for _, m := range tr.moves {
			if m.kind != moveCopy {
				continue
			}
			if src := units.of(m.src).loadBy; src != 0 && src < tr.id {
				x.addDep(tr, src, true)
			}
		}
	}
	// Hits on units that other transfers bring: the owner waits for
	// those too.
	if s := b.owner; s != nil {
		for i := range t.needs {
			n := &t.needs[i]
			if !n.act.pinsInPlace() {
				continue
			}
			if id := units.of(n.u).loadBy; id != 0 {
				x.wait(s, id)
				b.loading++
			}
		}
	}
}

// sortChains orders a transaction's chains into x.sorted by KV layer,
// keeping their order within a layer (a stable counting sort: a request's
// chains number its units, so a comparison sort would dominate submit),
// and within a layer those that read another transfer's data after the
// others, grouped by that transfer (rare: a stable sort of the few).
func (x *transfers) sortChains(chains []chain) {
	n := 0
	for i := range chains {
		n = max(n, int(chains[i].kvLayer)+2) // -1 (every layer) first
	}
	start := slices.Grow(x.layerStart[:0], n+1)[:n+1]
	clear(start)
	after := false
	for i := range chains {
		start[chains[i].kvLayer+2]++
		after = after || chains[i].after != 0
	}
	for k := 1; k <= n; k++ {
		start[k] += start[k-1]
	}
	x.sorted = slices.Grow(x.sorted[:0], len(chains))[:len(chains)]
	for _, ch := range chains {
		k := ch.kvLayer + 1
		x.sorted[start[k]] = ch
		start[k]++
	}
	x.layerStart = start
	if !after {
		return
	}
	for lo := 0; lo < len(x.sorted); {
		hi := lo
		for hi < len(x.sorted) && x.sorted[hi].kvLayer == x.sorted[lo].kvLayer {
			hi++
		}
		slices.SortStableFunc(x.sorted[lo:hi], func(a, b chain) int { return cmp.Compare(a.after, b.after) })
		lo = hi
	}
}
