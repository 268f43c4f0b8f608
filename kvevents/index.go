package kvevents

import (
	"iter"
	"slices"
)

// Index is a router's view of a fleet, built from the events alone: for
// each publisher (a server, named by the caller, for example by its
// topic), the media each block hash is stored on. It is what a KV-aware
// router keeps, in its simplest form, and serves to check a publisher:
// after each batch, a kvtier publisher's view here should equal the
// blocks its Translator announces (Translator.Reachable).
//
// The zero value is an empty Index ready to use. An Index is not safe
// for concurrent use.
type Index struct {
	// DropOrphans makes Apply drop a BlockStored run whose parent the
	// server does not hold on any medium, as vLLM's consumers do (they
	// cannot place it in their prefix tree). Either way such runs are
	// counted in Orphans.
	DropOrphans bool

	servers map[string]map[uint64][]string
	orphans uint64
	strays  uint64
}

// Apply applies the events of one batch published by server, in order.
// Events it does not know, and nil ones, are skipped.
func (ix *Index) Apply(server string, b Batch) {
	if ix.servers == nil {
		ix.servers = make(map[string]map[uint64][]string)
	}
	blocks := ix.servers[server]
	if blocks == nil {
		blocks = make(map[uint64][]string)
		ix.servers[server] = blocks
	}
	for _, ev := range b.Events {
		switch e := valueOf(ev).(type) {
		case BlockStored:
			if e.ParentBlockHash != nil && len(blocks[*e.ParentBlockHash]) == 0 {
				ix.orphans++
				if ix.DropOrphans {
					continue
				}
			}
			for _, h := range e.BlockHashes {
				if !slices.Contains(blocks[h], e.Medium) {
					blocks[h] = append(blocks[h], e.Medium)
					slices.Sort(blocks[h])
				}
			}
		case BlockRemoved:
			for _, h := range e.BlockHashes {
				i := slices.Index(blocks[h], e.Medium)
				if i < 0 {
					ix.strays++
					continue
				}
				blocks[h] = slices.Delete(blocks[h], i, i+1)
				if len(blocks[h]) == 0 {
					delete(blocks, h)
				}
			}
		case AllBlocksCleared:
			clear(blocks)
		}
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

// Media returns the media server holds block hash on, sorted, or nil.
// The slice is the Index's own: do not modify it.
func (ix *Index) Media(server string, hash uint64) []string {
	return ix.servers[server][hash]
}

// Len returns the number of blocks server holds on some medium.
func (ix *Index) Len(server string) int { return len(ix.servers[server]) }

// Blocks returns an iterator over server's blocks and their media, in
// no particular order. The Index must not change during the iteration.
func (ix *Index) Blocks(server string) iter.Seq2[uint64, []string] {
	return func(yield func(uint64, []string) bool) {
		for h, m := range ix.servers[server] {
			if !yield(h, m) {
				return
			}
		}
	}
}

// Servers returns an iterator over the servers the Index has seen.
func (ix *Index) Servers() iter.Seq[string] {
	return func(yield func(string) bool) {
		for s := range ix.servers {
			if !yield(s) {
				return
			}
		}
	}
}

// Match returns how many of hashes, from the first, server holds on
// some medium: the longest cached prefix a router scores it by.
func (ix *Index) Match(server string, hashes []uint64) int {
	blocks := ix.servers[server]
	for i, h := range hashes {
		if len(blocks[h]) == 0 {
			return i
		}
	}
	return len(hashes)
}

// Forget drops what the Index knows about server, as a router does when
// it missed events it cannot replay (see Message.Missed).
func (ix *Index) Forget(server string) { delete(ix.servers, server) }

// Orphans counts the BlockStored runs applied whose parent the server
// did not hold on any medium. A publisher that sends parents first and
// announces no block whose parent is gone never causes one.
func (ix *Index) Orphans() uint64 { return ix.orphans }

// Strays counts the removals of a block from a medium the server did not
// hold it on. A publisher whose removals follow its stores never causes
// one.
func (ix *Index) Strays() uint64 { return ix.strays }
