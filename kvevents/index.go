package kvevents

import (
	"iter"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
)

// Index is a router's view of a fleet, built from the events alone: for
// each publisher (a server, named by the caller, for example by its
// topic), the media each block hash is stored on. It answers the question
// a KV-aware router asks before each request, how much of this prompt each
// server holds (Score, Match), and serves to check a publisher: after each
// batch, a kvtier publisher's view here should equal the blocks its
// Translator announces (Translator.Reachable).
//
// The zero value is an empty Index ready to use. An Index is safe for
// concurrent use: subscribers of several servers may Apply while request
// handlers Score. Use one Index for the whole fleet rather than one per
// server: a block held by several servers is one entry, and Score reads
// each of the prompt's blocks once for all servers.
//
// The calls a router makes hold the Index's lock briefly: Apply gives it
// up every 1,024 block changes, and dropping a server's blocks (Forget,
// AllBlocksCleared) hides them at once and deletes them in steps of 1,024
// entries (Blocks, meant for checks, reads the whole Index in one hold).
// An Index tells 64 media apart: the 64th medium name it meets and every
// later one count as one.
type Index struct {
	// DropOrphans makes Apply drop a BlockStored run whose parent the
	// server does not hold on any medium, as vLLM's consumers do (they
	// cannot place it in their prefix tree). Either way such runs are
	// counted in Orphans. Set it before the Index is used.
	DropOrphans bool

	mu sync.RWMutex
	// blocks holds, per block hash, the servers that hold it and on
	// which media: a short list, since a block is on few servers.
	blocks map[uint64][]holder
	// servers is indexed by server id. An id is a server's until its
	// blocks are dropped (Forget, AllBlocksCleared): it is then dead, its
	// holders are ignored, deleted in steps (purge), and the id goes back
	// to free for a later server (at once if it held nothing). So ids are
	// about as many as the servers, and a Score's scratch is indexed by
	// them.
	servers []serverRec
	free    []uint32
	byName  map[string]uint32 // the live id of each server
	// media names the medium of each bit of a holder's mask.
	media   []string
	mediaIx map[string]uint8
	// purging is set while a call deletes dead holders with the lock
	// given up between steps; another call that drops a server then
	// leaves its holders to that one.
	purging         bool
	orphans, strays uint64
}

// holder says that a server holds a block, on the media of mask (bit i:
// media[i]).
type holder struct {
	server uint32
	mask   uint64
}

// serverRec is one server id's state.
type serverRec struct {
	name   string
	live   bool
	dead   bool // dropped, its holders not yet all deleted
	blocks int  // blocks the id holds on some medium
}

// maxMedia is the most medium names an Index tells apart (a mask's
// bits); a medium beyond them is counted as the last one.
const maxMedia = 64

// step is how many block changes Apply and a purge make before they give
// the lock up for a moment, so that no Score waits behind a long batch.
const step = 1024

// Apply applies the events of one batch published by server, in order.
// Events it does not know, and nil ones, are skipped. Concurrent calls
// may see part of the batch applied: a prefix of its block changes, in
// order. A Forget of the server that runs between two of Apply's steps
// drops what was applied so far, and the rest of the batch makes the
// server known again; a router that applies and forgets a server's
// batches from one goroutine (as it follows one Subscriber) never sees
// that.
func (ix *Index) Apply(server string, b Batch) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.init()
	id := ix.idOf(server)
	done := 0
	// pause gives the lock up for a moment every step block changes.
	// The server may be forgotten meanwhile: the rest of the batch then
	// goes to its new id.
	pause := func() {
		if done++; done == step {
			done = 0
			ix.mu.Unlock()
			ix.mu.Lock()
			id = ix.idOf(server)
		}
	}
	stored := func(e *BlockStored) {
		if e.ParentBlockHash != nil && ix.holderOf(*e.ParentBlockHash, id) == nil {
			ix.orphans++
			if ix.DropOrphans {
				return
			}
		}
		bit := ix.bit(e.Medium)
		for _, h := range e.BlockHashes {
			ix.store(h, id, bit)
			pause()
		}
	}
	removed := func(e *BlockRemoved) {
		i, known := ix.mediaIx[e.Medium]
		if !known && len(ix.media) == maxMedia {
			i, known = maxMedia-1, true
		}
		for _, h := range e.BlockHashes {
			if !known || !ix.remove(h, id, 1<<i) {
				ix.strays++
			}
			pause()
		}
	}
	for _, ev := range b.Events {
		// Each kind comes as a value or a pointer (Decode gives values);
		// the cases take both without copying an event into an
		// interface.
		switch e := ev.(type) {
		case BlockStored:
			stored(&e)
		case *BlockStored:
			if e != nil {
				stored(e)
			}
		case BlockRemoved:
			removed(&e)
		case *BlockRemoved:
			if e != nil {
				removed(e)
			}
		case AllBlocksCleared, *AllBlocksCleared:
			if p, ok := e.(*AllBlocksCleared); ok && p == nil {
				continue
			}
			if ix.servers[id].blocks == 0 {
				continue // nothing to clear: keep the id
			}
			ix.drop(id)
			id = ix.idOf(server)
		}
	}
	ix.purge()
}

// init makes the maps of a zero Index.
func (ix *Index) init() {
	if ix.blocks == nil {
		ix.blocks = make(map[uint64][]holder)
		ix.byName = make(map[string]uint32)
		ix.mediaIx = make(map[string]uint8)
	}
}

// idOf returns server's live id, giving it one if it has none.
func (ix *Index) idOf(server string) uint32 {
	if id, ok := ix.byName[server]; ok {
		return id
	}
	var id uint32
	if n := len(ix.free); n > 0 {
		id = ix.free[n-1]
		ix.free = ix.free[:n-1]
		ix.servers[id] = serverRec{name: server, live: true}
	} else {
		id = uint32(len(ix.servers))
		ix.servers = append(ix.servers, serverRec{name: server, live: true})
	}
	ix.byName[server] = id
	return id
}

// bit returns the mask bit of medium, registering the name.
func (ix *Index) bit(medium string) uint64 {
	i, ok := ix.mediaIx[medium]
	if !ok {
		if len(ix.media) == maxMedia {
			return 1 << (maxMedia - 1)
		}
		i = uint8(len(ix.media))
		ix.media = append(ix.media, medium)
		ix.mediaIx[medium] = i
	}
	return 1 << i
}

// holderOf returns id's holder of block h, or nil.
func (ix *Index) holderOf(h uint64, id uint32) *holder {
	hs := ix.blocks[h]
	for i := range hs {
		if hs[i].server == id {
			return &hs[i]
		}
	}
	return nil
}

// store records that id holds block h on the medium of bit.
func (ix *Index) store(h uint64, id uint32, bit uint64) {
	hs := ix.blocks[h]
	for i := range hs {
		if hs[i].server == id {
			hs[i].mask |= bit
			return
		}
	}
	ix.blocks[h] = append(hs, holder{server: id, mask: bit})
	ix.servers[id].blocks++
}

// remove records that id no longer holds block h on the medium of bit; it
// returns false when id did not hold it there.
func (ix *Index) remove(h uint64, id uint32, bit uint64) bool {
	hs := ix.blocks[h]
	for i := range hs {
		if hs[i].server != id {
			continue
		}
		if hs[i].mask&bit == 0 {
			return false
		}
		if hs[i].mask &^= bit; hs[i].mask == 0 {
			ix.servers[id].blocks--
			hs[i] = hs[len(hs)-1]
			if hs = hs[:len(hs)-1]; len(hs) == 0 {
				delete(ix.blocks, h)
			} else {
				ix.blocks[h] = hs
			}
		}
		return true
	}
	return false
}

// drop makes id dead: its blocks are ignored from now on and deleted by
// the next purge.
func (ix *Index) drop(id uint32) {
	s := &ix.servers[id]
	if !s.live {
		return
	}
	s.live = false
	delete(ix.byName, s.name)
	if s.blocks == 0 { // no holder names it: free it now
		*s = serverRec{}
		ix.free = append(ix.free, id)
		return
	}
	s.dead = true
}

// purge deletes the holders of the ids dead when it starts, in one pass
// over the map that gives the lock up every step entries, and frees those
// ids. A server dropped meanwhile (by a call that finds a purge under way
// and leaves it) has its holders deleted where the pass has yet to go,
// and the rest by the next purge, which the next Apply or Forget runs.
// (Go lets a map be changed while it is ranged over; the lock orders those
// changes with the range's reads.) The caller holds the lock.
func (ix *Index) purge() {
	if ix.purging {
		return
	}
	var dead []uint32
	for id := range ix.servers {
		if ix.servers[id].dead {
			dead = append(dead, uint32(id))
		}
	}
	if len(dead) == 0 {
		return
	}
	ix.purging = true
	defer func() { ix.purging = false }()
	n := 0
	for h, hs := range ix.blocks {
		keep := hs[:0]
		for _, x := range hs {
			if !ix.servers[x.server].dead {
				keep = append(keep, x)
			}
		}
		if len(keep) == 0 {
			delete(ix.blocks, h)
		} else if len(keep) < len(hs) {
			clear(hs[len(keep):])
			ix.blocks[h] = keep
		}
		if n++; n == step {
			n = 0
			ix.mu.Unlock()
			ix.mu.Lock()
		}
	}
	// No holder names those ids now (no call gives one to a dead id), so
	// they can serve again.
	for _, id := range dead {
		ix.servers[id] = serverRec{}
		ix.free = append(ix.free, id)
	}
}

// valueOf returns ev in its value form, or nil for a nil pointer.
func valueOf(ev Event) Event {
	switch e := ev.(type) {
	case *BlockStored:
		return deref(e)
	case *BlockRemoved:
		return deref(e)
	case *AllBlocksCleared:
		return deref(e)
	}
	return ev
}

// deref returns *p, or nil for a nil p.
func deref[T Event](p *T) Event {
	if p == nil {
		return nil
	}
	return *p
}

// Media returns the media server holds block hash on, sorted by name, or
// nil. The slice is new.
func (ix *Index) Media(server string, hash uint64) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, ok := ix.byName[server]
	if !ok {
		return nil
	}
	x := ix.holderOf(hash, id)
	if x == nil {
		return nil
	}
	return ix.names(x.mask)
}

// names returns the media of mask, sorted.
func (ix *Index) names(mask uint64) []string {
	var out []string
	for m := mask; m != 0; m &= m - 1 {
		out = append(out, ix.media[bits.TrailingZeros64(m)])
	}
	slices.Sort(out)
	return out
}

// Len returns the number of blocks server holds on some medium.
func (ix *Index) Len(server string) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, ok := ix.byName[server]
	if !ok {
		return 0
	}
	return ix.servers[id].blocks
}

// Blocks returns an iterator over server's blocks and their media (sorted
// by name), in no particular order. It lists them first, in one pass over
// every server's blocks under the read lock, and yields from the list
// without it: it is meant for checks and tools, not for a
// router's requests.
func (ix *Index) Blocks(server string) iter.Seq2[uint64, []string] {
	return func(yield func(uint64, []string) bool) {
		type entry struct {
			hash  uint64
			media []string
		}
		var list []entry
		ix.mu.RLock()
		if id, ok := ix.byName[server]; ok {
			list = make([]entry, 0, ix.servers[id].blocks)
			for h, hs := range ix.blocks {
				for _, x := range hs {
					if x.server == id {
						list = append(list, entry{h, ix.names(x.mask)})
					}
				}
			}
		}
		ix.mu.RUnlock()
		for _, e := range list {
			if !yield(e.hash, e.media) {
				return
			}
		}
	}
}

// Servers returns an iterator over the servers the Index knows (those
// Apply has seen and Forget has not dropped since), in name order.
func (ix *Index) Servers() iter.Seq[string] {
	ix.mu.RLock()
	names := make([]string, 0, len(ix.byName))
	for s := range ix.byName {
		names = append(names, s)
	}
	ix.mu.RUnlock()
	slices.Sort(names)
	return slices.Values(names)
}

// Match returns how many of hashes, from the first, server holds on
// some medium: the longest cached prefix a router scores it by.
func (ix *Index) Match(server string, hashes []uint64) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, ok := ix.byName[server]
	if !ok {
		return 0
	}
	for i, h := range hashes {
		if ix.holderOf(h, id) == nil {
			return i
		}
	}
	return len(hashes)
}

// Forget drops what the Index knows about server, as a router does when
// it missed events it cannot replay (see Message.Missed). Its blocks stop
// counting at once. They are deleted before Forget returns, in steps
// between which other calls run, unless another call is deleting dropped
// servers' blocks at the time: then that call or the next Apply or Forget
// deletes them.
func (ix *Index) Forget(server string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if id, ok := ix.byName[server]; ok {
		ix.drop(id)
		ix.purge()
	}
}

// Orphans counts the BlockStored runs applied whose parent the server
// did not hold on any medium. A publisher that sends parents first and
// announces no block whose parent is gone never causes one.
func (ix *Index) Orphans() uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.orphans
}

// Strays counts the removals of a block from a medium the server did not
// hold it on. A publisher whose removals follow its stores never causes
// one.
func (ix *Index) Strays() uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.strays
}

// Weights gives the worth of a cached block by the medium it is on, for
// Score: a block a server holds on the GPU saves it more than one it must
// first load from disk. A medium it does not name (or names with NaN)
// weighs 1, so nil Weights make every held block worth 1.
type Weights map[string]float64

// Score is one server's standing for a prompt.
type Score struct {
	// Server is the server's name, as given to Apply.
	Server string
	// Blocks is the longest prefix of the prompt's blocks the server
	// holds, each on some medium.
	Blocks int
	// Value is the sum, over those blocks, of the largest weight among
	// the media the server holds the block on.
	Value float64
}

// Score appends to dst the standing of every server the Index knows for
// a prompt whose block hashes are hashes, best first, and returns it. A
// server's prefix is the longest run of the prompt's blocks, from the
// first, that it holds on some medium; its Value weighs each of those
// blocks by the best medium it holds it on (see Weights). Servers are
// ordered by Value, then Blocks, both descending, then by name: the first
// is the one a prefix-aware router sends the request to, and a fleet
// where nothing matches is ordered by name (a router that wants load
// balancing there breaks the tie itself).
//
// Its cost is one lookup per block of the longest prefix any server holds
// (it stops at the first block no remaining server holds), plus the
// holders of each: it does not grow with the number of blocks the Index
// holds.
func (ix *Index) Score(dst []Score, hashes []uint64, w Weights) []Score {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	base := len(dst)
	n := len(ix.servers)
	// A server's row is its position in dst, by id (-1: not live).
	var rowBuf [64]int32
	var row []int32
	if n > len(rowBuf) {
		row = make([]int32, n)
	} else {
		row = rowBuf[:n]
	}
	for id := range ix.servers {
		s := &ix.servers[id]
		if !s.live {
			row[id] = -1
			continue
		}
		row[id] = int32(len(dst))
		dst = append(dst, Score{Server: s.name})
	}
	var weightBuf [8]float64
	var weight []float64
	if len(ix.media) > len(weightBuf) {
		weight = make([]float64, len(ix.media))
	} else {
		weight = weightBuf[:len(ix.media)]
	}
	for i, m := range ix.media {
		weight[i] = 1
		if v, ok := w[m]; ok && !math.IsNaN(v) {
			weight[i] = v
		}
	}
	for i, h := range hashes {
		advanced := false
		for _, x := range ix.blocks[h] {
			r := row[x.server]
			if r < 0 || dst[r].Blocks != i {
				continue
			}
			best := weight[bits.TrailingZeros64(x.mask)]
			for m := x.mask & (x.mask - 1); m != 0; m &= m - 1 {
				best = max(best, weight[bits.TrailingZeros64(m)])
			}
			dst[r].Blocks = i + 1
			dst[r].Value += best
			advanced = true
		}
		if !advanced {
			break
		}
	}
	slices.SortFunc(dst[base:], compareScores)
	return dst
}

// compareScores orders scores best first (see Index.Score).
func compareScores(a, b Score) int {
	switch {
	case a.Value != b.Value:
		if a.Value > b.Value {
			return -1
		}
		return 1
	case a.Blocks != b.Blocks:
		return b.Blocks - a.Blocks
	}
	return strings.Compare(a.Server, b.Server)
}
