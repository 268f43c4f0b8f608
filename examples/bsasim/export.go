package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvtier/kvtier/eviction/trace"
	"github.com/kvtier/kvtier/layout"
)

// The exported trace is what the GPU tier sees, one request per unit, in
// the order kvcache sees them:
//
//   - a write request for every unit of a token block when the block is
//     created (prefill, and decode steps that start a new block): the unit
//     enters the GPU then, so a replay must insert it too;
//   - an access request for every unit a decode step touches, layer by
//     layer, by slice then block within a layer (the order of
//     layout.AppendTouched and of kvcache's SparseResult).
//
// A request's id is sequence<<40 | slice<<20 | block (sequences never share
// a unit, as the cache is reset for each); its size is the unit's bytes.
// Its time is a virtual clock in decode steps: sequence s's prefill at
// s*(steps+1), its decode step t at s*(steps+1)+1+t. next_access_vtime is
// libCacheSim's: the 1-based index of the id's next request, -1 if none.

// traceID names one unit of one sequence in the exported trace.
func traceID(seq, slice, block int) uint64 {
	return uint64(seq)<<40 | uint64(slice)<<20 | uint64(block)
}

// unitTrace returns the requests of the whole workload on layout lay, with
// NextAccess computed.
func unitTrace(lay *layout.Layout, w *workload) ([]trace.Request, error) {
	cfg := w.cfg
	unitBytes := lay.Pools()[0].UnitBytes
	slices := lay.UnitsPerBlock()
	unitTokens := lay.TokensPerUnit()
	if cfg.context/unitTokens >= 1<<20 || slices >= 1<<20 || cfg.sequences >= 1<<24 {
		return nil, fmt.Errorf("export: ids do not fit (%d blocks, %d slices, %d sequences)", cfg.context/unitTokens, slices, cfg.sequences)
	}
	var reqs []trace.Request
	var touched []layout.UnitRef
	write := func(s, block int, time int64) {
		for sl := range slices {
			reqs = append(reqs, trace.Request{Time: time, ID: traceID(s, sl, block), Size: unitBytes})
		}
	}
	for s := range cfg.sequences {
		base := int64(s) * int64(cfg.steps+1)
		blocks := (cfg.prompt() + unitTokens - 1) / unitTokens
		for b := range blocks {
			write(s, b, base)
		}
		for t := range cfg.steps {
			n := w.tokensAt(t)
			if (n-1)%unitTokens == 0 {
				write(s, (n-1)/unitTokens, base+1+int64(t))
			}
			var err error
			touched, err = lay.AppendTouched(touched[:0], w.selection(s, t))
			if err != nil {
				return nil, err
			}
			for _, u := range touched {
				reqs = append(reqs, trace.Request{Time: base + 1 + int64(t), ID: traceID(s, u.Slice, int(u.Block)), Size: unitBytes})
			}
		}
	}
	setNextAccess(reqs)
	return reqs, nil
}

// setNextAccess fills NextAccess by one backward pass: the 1-based virtual
// time of the next request for the same id, -1 for the last one.
func setNextAccess(reqs []trace.Request) {
	next := make(map[uint64]int64)
	for i := len(reqs) - 1; i >= 0; i-- {
		id := reqs[i].ID
		if v, ok := next[id]; ok {
			reqs[i].NextAccess = v
		} else {
			reqs[i].NextAccess = -1
		}
		next[id] = int64(i) + 1
	}
}

// exportPath names the trace file of one layout: path itself when only one
// layout is exported, else path with ".<layout>" before its extension.
func exportPath(path, layoutName string, several bool) string {
	if !several {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "." + layoutName + ext
}

// exportFile writes the trace of layout lay to path and returns the number
// of requests written.
func exportFile(path string, lay *layout.Layout, w *workload) (int, error) {
	reqs, err := unitTrace(lay, w)
	if err != nil {
		return 0, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(f)
	ow := trace.NewOracleGeneralWriter(bw)
	for _, r := range reqs {
		if err := ow.Write(r); err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := ow.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	return len(reqs), f.Close()
}
