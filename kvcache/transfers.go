package kvcache

import (
	"errors"
	"fmt"
	"slices"
)

// With a TransferEngine (Config.Engine) an operation's copies leave the
// cache's lock. The transaction plans them exactly as with a synchronous
// Mover (the same victims, slots and batch, counted in Stats and reported
// by events as planned), commits at once, and hands the batch to the
// engine as transfers that complete later (Poll applies them). Meanwhile
// the units in flight are held (unitState.busy) and marked:
//
//   - a unit arriving on the GPU (onboarded, copied on write, or fresh in a
//     slot whose old content is still moving down) has its slot but is not
//     readable (unitState.loadBy); the hold keeps it pinned in its policy, so it
//     is not evicted, and a sequence that hits it waits for the same
//     transfer;
//   - a victim moving down (unitState.storeBy) is in its new slot, pinned in that
//     tier's policy until its bytes are there; a request that needs it
//     meanwhile loads it back by a transfer that starts when the move is
//     done (a data dependency);
//   - a load's source stays in its slot below, pinned, until the load is
//     done, and a copy's source stays pinned.
//
// So no slot a transfer reads or writes is handed out before it finishes:
// a victim's slot goes to the unit that replaces it only within the same
// transfer, whose copies run in order (the victim's move first), and that
// unit is not readable before the transfer ends. Transfers are otherwise
// independent, and an engine may run them in any order, in parallel.
//
// A transfer is one KV layer's share of an operation: for each unit the
// operation needs, the chain of copies that makes its slot ready (the
// victims that leave it, deepest first, then the copy into it), grouped by
// KV layer and started in layer order, so that layer l's attention can run
// while layer l+1 loads (Readiness). Request.MaxLoadTokens cuts a layer's
// share further and starts the pieces one after the other.
//
// A transfer that fails is compensated, never served: a unit whose load or
// copy failed keeps its GPU slot but has no bytes (unitUnwritten; its
// block no longer counts it, so no request reuses the block) and becomes a
// recompute range for every sequence that waits on it (Readiness); its
// source below is freed. A victim whose move down failed is dropped. A
// transfer that reads what a failed one was to write fails without
// starting. An engine that reports which copies failed (CopyErrors) has
// only those units compensated (and any copy that read what a failed one
// was to write, a guard: the planner keeps such reads in transfers of
// their own); the transfers that read from the transfer still fail
// whole. Each failure is reported as a move to Dropped (an event) and
// counted in TierStats.Failed; nothing else is undone, since the moves
// were counted as planned.

// transferID names a transfer of a cache among those it knows (byID); 0
// is none. Ids wrap around, skipping those still in use.
type transferID uint32

// moveKind is what a move of a transfer does.
type moveKind uint8

const (
	moveLoad   moveKind = iota // u arrives on the GPU from (from, slot) below
	moveCopy                   // u is filled on the GPU from src (copy-on-write)
	moveDown                   // victim u arrives in slot of tier from+1
	moveVacate                 // no copy: u's GPU slot is its own once the moves before it are done
	moveBackup                 // u's backup is written into slot of the write-through tier
)

// move is what one step of a transfer does to a unit.
type move struct {
	kind moveKind
	from Tier
	u    UnitID
	src  UnitID // moveCopy: the unit copied
	slot int32  // moveLoad: the slot left below; moveDown: the slot arrived in
	// copy is the index of its copy in the transfer's copies (-1 for
	// moveVacate, which has none); while the transaction runs, in its
	// batch.
	copy int32
}

// transfer is one unit of work handed to the engine.
type transfer struct {
	id      transferID
	kvLayer int32 // the KV layer of its units, -1 when they span every layer
	copies  []Copy
	moves   []move
	// deps counts the unfinished transfers it starts after; depErr is the
	// error of one it reads from that failed: it then fails unstarted.
	deps    int32
	depErr  error
	started bool
	done    bool
	// building says that its operation still adds chains to it (a long
	// operation between its steps, see xferBuild): it starts when the
	// operation is planned (startBuilt), even if what it waits for ends
	// before, since copies added after the engine took it would never
	// run.
	building bool
	// failed lists the units whose bytes did not arrive.
	failed []UnitID
	// applying says that the engine finished the transfer and poll is
	// applying its moves (applied of them so far), with err, or errs per
	// copy, as the engine reported them (see transfers.finished).
	applying bool
	applied  int32
	err      error
	errs     []error
	// waiters lists the sequences that wait on the transfer (it is in
	// their waits until it finishes; then its failures move to their
	// failed lists and it is forgotten).
	waiters []*sequence
}

// dependent is a transfer that starts after another: data says that it
// reads what the other writes (so it fails when the other fails), as
// opposed to being merely ordered after it (MaxLoadTokens).
type dependent struct {
	id   transferID
	data bool
}

// transfers is the cache's table of transfers: those in flight and those
// finished but not yet seen by every sequence that waits on them.
type transfers struct {
	next transferID
	byID map[transferID]*transfer
	// dependents lists the transfers that start after each one.
	dependents map[transferID][]dependent
	// declared holds the sequences whose declared writes wait for a
	// transfer (see commitThrough).
	declared map[*sequence]struct{}
	inbox    inbox
	scratch  []finished
	// sorted and layerStart are sortChains' buffers.
	sorted     []chain
	layerStart []int
	// left holds the slots units left while a transfer still held them
	// (leaveSlot); broken says that the engine's Start panicked.
	left     map[UnitID][]leftSlot
	broken   bool
	inFlight int
	// drops lists units without bytes to drop once the running operation
	// is over (dropLater).
	drops []UnitID
	// build is the transfers an operation of one transaction makes
	// (submit).
	build xferBuild
	// applying lists the transfers the engine finished whose moves poll
	// is applying, oldest first; behind says that the last unlock left
	// declared commits it could have made (a step's worth per call).
	applying []*transfer
	behind   bool
	// ready is end's result buffer.
	ready []*transfer
}

func (x *transfers) init() {
	x.byID = make(map[transferID]*transfer)
	x.dependents = make(map[transferID][]dependent)
	x.declared = make(map[*sequence]struct{})
	x.left = make(map[UnitID][]leftSlot)
	x.inbox.init()
}

// add registers a new transfer in flight, under an id no known transfer
// uses.
func (x *transfers) add(kvLayer int32) *transfer {
	for {
		x.next++
		if _, used := x.byID[x.next]; x.next != 0 && !used {
			break
		}
	}
	tr := &transfer{id: x.next, kvLayer: kvLayer}
	x.byID[tr.id] = tr
	x.inFlight++
	return tr
}

// addDep makes tr start after transfer on, if that is unfinished.
func (x *transfers) addDep(tr *transfer, on transferID, data bool) {
	if d, ok := x.byID[on]; !ok || d.done {
		return
	}
	tr.deps++
	x.dependents[on] = append(x.dependents[on], dependent{id: tr.id, data: data})
}

// wait registers s as waiting on unfinished transfer id, once. A
// sequence's waits hold only unfinished transfers (a finished one takes
// itself off them, see finish), so their length, and the cost of this
// check, is bounded by what is in flight for the sequence, not by how
// many transfers it ever waited on; a transfer's waiters are few (its
// operation's sequence, a fork, sequences that hit units it loads).
func (x *transfers) wait(s *sequence, id transferID) {
	tr, ok := x.byID[id]
	if !ok || tr.done || slices.Contains(tr.waiters, s) {
		return
	}
	s.waits = append(s.waits, id)
	tr.waiters = append(tr.waiters, s)
}

// unwait drops s's waits (the sequence ends).
func (x *transfers) unwait(s *sequence) {
	for _, id := range s.waits {
		if tr, ok := x.byID[id]; ok {
			tr.waiters = removeOne(tr.waiters, s)
		}
	}
	s.waits = s.waits[:0]
	clear(s.failed)
	s.failed = s.failed[:0]
}

// removeOne removes the first element of xs equal to x, moving the last
// one into its place (the order of waits and waiters does not matter).
func removeOne[T comparable](xs []T, x T) []T {
	for i, y := range xs {
		if y == x {
			last := len(xs) - 1
			xs[i] = xs[last]
			var zero T
			xs[last] = zero
			return xs[:last]
		}
	}
	return xs
}

// hasWork reports whether finished transfers left work (Cache.mu held):
// moves of those poll began, reports it has not taken, or commits they let
// through.
func (x *transfers) hasWork() bool {
	return len(x.applying) > 0 || x.behind || x.byID != nil && x.inbox.ready()
}

// finished queues finished transfer tr (err: what the engine reported)
// to be applied: its error, or each copy's when the engine reported them
// (CopyErrors), is kept for its moves (errOf).
func (x *transfers) finished(tr *transfer, err error) {
	tr.applying = true
	var ce CopyErrors
	switch {
	case !errors.As(err, &ce):
	case len(ce) == len(tr.copies):
		if err = ce.Err(); err != nil { // nil when every copy completed
			tr.errs = copyFailures(tr.copies, ce)
		}
	default:
		// Which copies failed is unknown: all did, and none counts as
		// missing or corrupt.
		err = fmt.Errorf("%w: the engine reported %d copy errors for %d copies: %v", ErrCopyFailed, len(ce), len(tr.copies), err)
	}
	tr.err = err
	x.applying = append(x.applying, tr)
}

// errOf is the error of move m of finished transfer tr: the copy's own
// when the engine reported one per copy, else the transfer's.
func (tr *transfer) errOf(m move) error {
	if tr.errs != nil && m.copy >= 0 {
		return tr.errs[m.copy]
	}
	return tr.err
}

// collect queues the transfers the engine reported finished since the
// last call (finished), ignoring reports of transfers it does not know
// as running.
func (x *transfers) collect() {
	if !x.inbox.ready() {
		return
	}
	x.scratch = x.inbox.take(x.scratch[:0])
	for _, f := range x.scratch {
		if tr, ok := x.byID[f.id]; ok && tr.started && !tr.done && !tr.applying {
			x.finished(tr, f.err)
		}
	}
}

// oldest returns the oldest finished transfer whose moves are still to be
// applied, or nil.
func (x *transfers) oldest() *transfer {
	if len(x.applying) == 0 {
		return nil
	}
	return x.applying[0]
}

// end ends transfer tr, the oldest being applied, every move of which is
// applied: it is done and forgotten. The transfers that waited for it
// and wait for no other now either fail unstarted, when they read what it
// failed to write (queued to be applied like it), or are returned, to be
// started (in x.ready, valid until the next call). The sequences that
// wait on it still list it (tr.waiters): the caller settles them.
func (x *transfers) end(tr *transfer) []*transfer {
	x.applying[0] = nil
	x.applying = x.applying[1:]
	tr.done = true
	x.inFlight--
	deps := x.dependents[tr.id]
	delete(x.dependents, tr.id)
	delete(x.byID, tr.id)
	clear(x.ready)
	ready := x.ready[:0]
	for _, dep := range deps {
		d, ok := x.byID[dep.id]
		if !ok || d.done || d.applying {
			continue
		}
		if dep.data && tr.err != nil && d.depErr == nil {
			// (%v: the units it moves are not the ones a store lacked,
			// so countUnreadable must not count them.)
			d.depErr = fmt.Errorf("%w: it reads what transfer %d was to write, which failed: %v", ErrCopyFailed, tr.id, tr.err)
		}
		if d.deps--; d.deps > 0 || d.building {
			continue
		}
		if d.depErr != nil {
			d.started = true
			x.finished(d, d.depErr)
		} else {
			ready = append(ready, d)
		}
	}
	x.ready = ready
	return ready
}

// leftSlot is a slot of a lower tier that a unit left while a transfer
// may still read or write it: a load's source, or the copy below of a
// unit recomputed while held (its move down may still write it, a
// copy-on-write still read it).
type leftSlot struct {
	tier   Tier
	slot   int32
	backup bool
}
