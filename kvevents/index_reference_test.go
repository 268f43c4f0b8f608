package kvevents

import (
	"math"
	"slices"
	"strings"
)

// refIndex is the plainest Index: per server, a map from block hash to
// its sorted media; Score asks each server's Match. It is what Index was
// before it served a fleet, kept as the reference the tests compare the
// Index with, and as the obvious alternative its benchmarks compare with.
type refIndex struct {
	dropOrphans     bool
	servers         map[string]map[uint64][]string
	orphans, strays uint64
}

func newRefIndex(dropOrphans bool) *refIndex {
	return &refIndex{dropOrphans: dropOrphans, servers: map[string]map[uint64][]string{}}
}

func (ix *refIndex) apply(server string, b Batch) {
	blocks := ix.servers[server]
	if blocks == nil {
		blocks = map[uint64][]string{}
		ix.servers[server] = blocks
	}
	for _, ev := range b.Events {
		switch e := valueOf(ev).(type) {
		case BlockStored:
			if e.ParentBlockHash != nil && len(blocks[*e.ParentBlockHash]) == 0 {
				ix.orphans++
				if ix.dropOrphans {
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

func (ix *refIndex) match(server string, hashes []uint64) int {
	blocks := ix.servers[server]
	for i, h := range hashes {
		if len(blocks[h]) == 0 {
			return i
		}
	}
	return len(hashes)
}

// score is Index.Score by its definition: each server's Match, its
// blocks weighed by their best medium, sorted.
func (ix *refIndex) score(hashes []uint64, w Weights) []Score {
	var out []Score
	for s, blocks := range ix.servers {
		sc := Score{Server: s, Blocks: ix.match(s, hashes)}
		for _, h := range hashes[:sc.Blocks] {
			best := 0.0
			for i, m := range blocks[h] {
				v, ok := w[m]
				if !ok || math.IsNaN(v) {
					v = 1
				}
				if i == 0 || v > best {
					best = v
				}
			}
			sc.Value += best
		}
		out = append(out, sc)
	}
	slices.SortFunc(out, func(a, b Score) int {
		switch {
		case a.Value > b.Value:
			return -1
		case a.Value < b.Value:
			return 1
		case a.Blocks != b.Blocks:
			return b.Blocks - a.Blocks
		}
		return strings.Compare(a.Server, b.Server)
	})
	return out
}
