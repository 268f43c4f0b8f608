package kvcache_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
)

// oracleServer is an inference server as a user of kvcache writes one: the
// tiny model's K/V lives only in the GPU slots of a MemoryStore, at the
// places the sequences' block tables give. It reads a slot only through a
// table entry (a -1 entry is an error), writes only positions a plan told it
// to compute, and compares every logits vector it computes, bit for bit, with
// the no-cache twin's.
type oracleServer struct {
	c     *kvcache.Cache
	mem   *kvcache.MemoryStore
	m     *tinyModel
	lay   *layout.Layout
	block int
	// layerWise waits for each layer before computing it (Readiness per
	// layer, the overlap a server gets from an engine); otherwise the
	// server waits for every layer first. Ignored without an engine.
	layerWise bool
	async     bool
	// lookup, when not nil, runs before each request's Acquire: a server
	// that asks a shared store what it holds (tierstore.Lookup).
	lookup func(kvcache.Request) error
	// loc[l][h][c][t] places component c (0 = K, 1 = V) of head h of layer
	// l at token t of a block: the slice, the byte offset of dimension 0 and
	// the stride between dimensions.
	loc [][][2][]elemLoc
	// mismatches counts logits or K/V that differ from the twin's; with
	// tolerate set they are counted instead of failing the request (the
	// sensitivity check).
	tolerate               bool
	mismatches, logitsSeen atomic.Int64
	kvSeen                 atomic.Int64
	// sparse serves every request as a sparse sequence (see
	// oracle_sparse_test.go), and counts what its SparseAccess calls did:
	// the calls (those with Selection.Keep, of a restore, apart), the
	// units they onboarded from a lower tier, those they restored
	// (SparseUnit.From Dropped) and the onboarded ones rewritten because
	// Readiness reported a failed load in their block.
	sparse                                      bool
	sparseCalls, sparseOnboards, sparseRestores atomic.Int64
	sparseKeeps, sparseFailed                   atomic.Int64
	// covered counts the paths of the cache the dense workload took.
	covered oracleCoverage
}

// oracleCoverage counts the paths of the cache a workload took, so that a
// test can require that each was taken (see TestModelOracle), rather than
// pass without having exercised it.
type oracleCoverage struct {
	// The Truncates of speculative decoding: rejecting nothing, only
	// drafts, past the drafts into earlier tokens, into the prompt, to a
	// block boundary, with a copy-on-write of the new partial block, and
	// with tokens to recompute.
	truncNone, truncDrafts, truncPastDrafts, truncIntoPrompt atomic.Int64
	truncBoundary, truncCopy, truncRecompute                 atomic.Int64
	// Prefetches that onboarded units; Acquires whose onboard was more
	// than Request.MaxLoadTokens (cut into transfers one after the
	// other); failed prefills (garbage written) ended by Abort and by
	// Release.
	prefetched, maxLoadCut, garbageAbort, garbageRelease atomic.Int64
}

type elemLoc struct {
	slice, pool int
	off, stride int64
}

func newOracleServer(c *kvcache.Cache, mem *kvcache.MemoryStore, m *tinyModel, async bool) (*oracleServer, error) {
	lay := c.Layout()
	s := &oracleServer{c: c, mem: mem, m: m, lay: lay, block: lay.TokensPerUnit(), async: async}
	model := lay.Model()
	stored := model.KVHeads // heads stored per KV layer: 1 under MLA
	if model.MLALatentDims > 0 {
		stored = 1
	}
	kd, vd := m.storedDims()
	if model.Layers != m.layers || stored != m.kvHeads || model.HeadDim != m.headDim || model.ElemBytes != 4 ||
		(m.latent > 0) != (model.MLALatentDims > 0) || (m.latent > 0 && model.MLALatentDims+model.MLARopeDims != m.latent) {
		return nil, fmt.Errorf("oracle: layout %+v does not fit the model", model)
	}
	s.loc = make([][][2][]elemLoc, m.layers)
	for l := range m.layers {
		kvl, err := model.KVLayerOf(l)
		if err != nil {
			return nil, err
		}
		s.loc[l] = make([][2][]elemLoc, m.kvHeads)
		for h := range m.kvHeads {
			for comp, dims := range [2]int{kd, vd} {
				if dims == 0 {
					continue // no V under MLA
				}
				for t := range s.block {
					e := layout.Element{KVLayer: kvl, KVHead: h, Component: layout.Key + layout.Component(comp), Token: t}
					if m.latent > 0 {
						e.Component = layout.Latent
					}
					sl, off, err := lay.Locate(e)
					if err != nil {
						return nil, err
					}
					var stride int64 = 4
					if dims > 1 {
						e.Dim = 1
						_, off1, err := lay.Locate(e)
						if err != nil {
							return nil, err
						}
						stride = off1 - off
					}
					s.loc[l][h][comp] = append(s.loc[l][h][comp], elemLoc{slice: sl, pool: c.SlicePool(sl), off: off, stride: stride})
				}
			}
		}
	}
	return s, nil
}

// oracleSeq is one live sequence of the server, with its no-cache twin.
type oracleSeq struct {
	s      *oracleServer
	id     kvcache.SeqID
	tokens []uint32
	// prompt is the length of the prompt it was acquired (or forked) with.
	prompt int
	// logits[p] is what the server computed at position p (nil when it
	// never computed p: a reused prefix).
	logits [][]float32
	// writable lists the positions the server may write now: the Compute of
	// the plans it has not finished and the Recompute of its waits.
	writable []kvcache.TokenRange
	// pending lists, sorted, the positions still to compute; undeclared
	// those computed but not yet declared written (by Append or Commit),
	// which the cache's Readiness keeps reporting until then.
	pending    []int
	undeclared map[int]bool
	tables     [][]int32
	twin       *twinKV
	twinLog    [][]float32
	// lora and extra are the request's LoRA and extra keys (see salt).
	lora  string
	extra []radix.ExtraKey
	// sp is the state of a sparse sequence's step (see sparseState).
	sp sparseState
}

func (s *oracleServer) newSeq(id kvcache.SeqID, tokens []uint32) *oracleSeq {
	return &oracleSeq{s: s, id: id, tokens: slices.Clone(tokens), prompt: len(tokens), twin: newTwinKV(s.m)}
}

// salt is what the KV at position p depends on besides the tokens: the
// sequence's LoRA adapter and the multimodal item whose placeholder is at p.
func (q *oracleSeq) salt(p int) uint64 {
	var s uint64
	if q.lora != "" {
		s = uint64(len(q.lora))*0x51_7cc1_b727_220a + uint64(q.lora[0])
	}
	for _, k := range q.extra {
		if k.Pos == p {
			s ^= k.Value
		}
	}
	return s
}

// refresh copies the sequence's block tables (a kernel's arguments).
func (q *oracleSeq) refresh() error {
	n := q.s.lay.UnitsPerBlock()
	if len(q.tables) != n {
		q.tables = make([][]int32, n)
	}
	for sl := range n {
		var err error
		if q.tables[sl], err = q.s.c.BlockTable(q.tables[sl][:0], q.id, sl); err != nil {
			return err
		}
	}
	return nil
}

func (q *oracleSeq) slot(e elemLoc, p int, what string, l, h int) ([]byte, error) {
	b := p / q.s.block
	t := q.tables[e.slice]
	if b >= len(t) || t[b] < 0 {
		return nil, fmt.Errorf("oracle: seq %d %s of position %d (layer %d head %d): block %d has no slot in slice %d (table %v)",
			q.id, what, p, l, h, b, e.slice, t)
	}
	buf := q.s.mem.Bytes(kvcache.GPU, e.pool, t[b])
	if buf == nil {
		return nil, fmt.Errorf("oracle: seq %d: slot %d of pool %d does not exist", q.id, t[b], e.pool)
	}
	return buf, nil
}

func (q *oracleSeq) read(l, h, p int) ([]float32, []float32, error) {
	var out [2][]float32
	kd, vd := q.s.m.storedDims()
	for comp, dims := range [2]int{kd, vd} {
		if dims == 0 {
			continue
		}
		e := q.s.loc[l][h][comp][p%q.s.block]
		buf, err := q.slot(e, p, "read", l, h)
		if err != nil {
			return nil, nil, err
		}
		v := make([]float32, dims)
		for d := range v {
			o := e.off + int64(d)*e.stride
			v[d] = math.Float32frombits(binary.LittleEndian.Uint32(buf[o:]))
		}
		out[comp] = v
	}
	return out[0], out[1], nil
}

func (q *oracleSeq) write(l, h, p int, k, v []float32) error {
	if !inRanges(q.writable, p) {
		return fmt.Errorf("oracle: seq %d writes position %d (layer %d), outside the ranges it was told to compute %v", q.id, p, l, q.writable)
	}
	return q.put(l, h, p, k, v)
}

// put stores the K/V of head h of layer l at position p into the slot the
// block tables give, whatever the position (write checks that first).
func (q *oracleSeq) put(l, h, p int, k, v []float32) error {
	for comp, vec := range [2][]float32{k, v} {
		if len(vec) == 0 {
			continue // no V under MLA
		}
		e := q.s.loc[l][h][comp][p%q.s.block]
		buf, err := q.slot(e, p, "write", l, h)
		if err != nil {
			return err
		}
		for d, x := range vec {
			binary.LittleEndian.PutUint32(buf[e.off+int64(d)*e.stride:], math.Float32bits(x))
		}
	}
	return nil
}

func inRanges(rs []kvcache.TokenRange, p int) bool {
	for _, r := range rs {
		if r.Start <= p && p < r.End {
			return true
		}
	}
	return false
}

// twinLogits returns the no-cache run's logits at position p of the
// sequence's tokens, computing the twin up to p.
func (q *oracleSeq) twinLogits(p int) []float32 {
	for n := len(q.twinLog); n <= p; n++ {
		lg, err := q.s.m.forward(q.twin, n, q.tokens[n], q.salt(n), true)
		if err != nil {
			panic(err)
		}
		q.twinLog = append(q.twinLog, lg)
	}
	return q.twinLog[p]
}

// cut forgets the twin's and the server's outputs past n tokens (Truncate).
func (q *oracleSeq) cut(n int) {
	q.tokens = q.tokens[:n]
	for len(q.pending) > 0 && q.pending[len(q.pending)-1] >= n {
		q.pending = q.pending[:len(q.pending)-1]
	}
	// A Truncate may pin blocks again (a window moving back), whose loads
	// may fail anew: what the cache reports after it is computed again.
	clear(q.undeclared)
	if len(q.twinLog) > n {
		q.twinLog = q.twinLog[:n]
	}
	if len(q.logits) > n {
		q.logits = q.logits[:n]
	}
}

func (s *oracleServer) mismatch(err error) error {
	s.mismatches.Add(1)
	if s.tolerate {
		return nil
	}
	return err
}

// wait returns the ranges to recompute that the sequence's transfers left,
// waiting for layer l (every layer when l < 0).
func (q *oracleSeq) wait(l int) ([]kvcache.TokenRange, error) {
	if !q.s.async {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return q.s.c.WaitReady(ctx, q.id, l)
}

// compute adds the positions of rs to those the sequence must compute and
// computes the first limit of them in position order (all when limit is 0),
// with every position the waits ask to recompute added on the way: a
// position reads the K/V of every earlier one, so a range to recompute that
// a wait finds past a position still to compute waits for it. It checks
// every logits vector against the twin. With layerWise it runs layer by
// layer, waiting for each; a wait that finds a failed load starts the chunk
// over from layer 0 with the new positions (recomputing a position writes
// the same bits).
func (q *oracleSeq) compute(rs []kvcache.TokenRange, limit int) error {
	q.addPending(rs)
	for {
		if !q.s.layerWise || !q.s.async {
			rec, err := q.wait(-1)
			if err != nil {
				return err
			}
			q.addPending(rec)
		}
		if err := q.refresh(); err != nil {
			return err
		}
		pos := q.pending
		if limit > 0 && len(pos) > limit {
			pos = pos[:limit]
		}
		q.writable = q.writable[:0]
		for _, p := range pos {
			q.writable = append(q.writable, kvcache.TokenRange{Start: p, End: p + 1})
		}
		xs := make([][]float32, len(pos))
		for i, p := range pos {
			xs[i] = q.s.m.embed(p, q.tokens[p], q.salt(p))
		}
		restart := false
		for l := 0; l < q.s.m.layers && !restart; l++ {
			if q.s.layerWise && q.s.async {
				rec, err := q.wait(l)
				if err != nil {
					return err
				}
				if q.addPending(rec) {
					restart = true
					break
				}
				if err := q.refresh(); err != nil {
					return err
				}
			}
			for i, p := range pos {
				if err := q.s.m.layer(q, l, p, xs[i], true); err != nil {
					return err
				}
			}
		}
		if restart {
			continue
		}
		for i, p := range pos {
			if err := q.check(p, q.s.m.logits(xs[i])); err != nil {
				return err
			}
		}
		if q.undeclared == nil {
			q.undeclared = map[int]bool{}
		}
		for _, p := range pos {
			q.undeclared[p] = true
		}
		q.pending = q.pending[len(pos):]
		q.writable = q.writable[:0]
		return nil
	}
}

// addPending adds the positions of rs to those to compute.
// It reports whether one was new: neither pending nor computed since the
// last declaration.
func (q *oracleSeq) addPending(rs []kvcache.TokenRange) bool {
	added := false
	for _, r := range rs {
		for p := r.Start; p < r.End; p++ {
			if !q.undeclared[p] && !slices.Contains(q.pending, p) {
				q.pending = append(q.pending, p)
				added = true
			}
		}
	}
	slices.Sort(q.pending)
	return added
}

// declared forgets the positions computed since the last declaration: the
// server has just declared every one written (Append). A Commit that covers
// only part of a block the cache owes leaves it owed, so the positions stay.
func (q *oracleSeq) declared() { clear(q.undeclared) }

// written returns how many tokens from the start are written: the first
// position still to compute, or the whole sequence.
func (q *oracleSeq) written() int {
	if len(q.pending) > 0 {
		return q.pending[0]
	}
	return len(q.tokens)
}

// check compares the logits the server computed at p with the twin's.
func (q *oracleSeq) check(p int, got []float32) error {
	for len(q.logits) <= p {
		q.logits = append(q.logits, nil)
	}
	q.logits[p] = got
	q.s.logitsSeen.Add(1)
	want := q.twinLogits(p)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return q.s.mismatch(fmt.Errorf("oracle: seq %d position %d: logit %d is %v, the no-cache run gives %v%s", q.id, p, i, got[i], want[i], q.diagnose(p)))
		}
	}
	return nil
}

// lastLogits returns the logits of the sequence's last token, running its
// forward pass over the stored K/V (nothing written) when no plan computed
// it: a wholly cached prompt, or a sequence cut back by Truncate.
func (q *oracleSeq) lastLogits() ([]float32, error) {
	p := len(q.tokens) - 1
	if p < len(q.logits) && q.logits[p] != nil {
		return q.logits[p], nil
	}
	return q.rerunLast()
}

// rerunLast runs the forward pass of the sequence's last token over the
// stored K/V, writing nothing, and checks its logits.
func (q *oracleSeq) rerunLast() ([]float32, error) {
	p := len(q.tokens) - 1
	if _, err := q.wait(-1); err != nil {
		return nil, err
	}
	if err := q.refresh(); err != nil {
		return nil, err
	}
	got, err := q.s.m.forward(q, p, q.tokens[p], q.salt(p), false)
	if err != nil {
		return nil, err
	}
	return got, q.check(p, got)
}

// checkKV compares every K/V vector the sequence's tables give, for the
// positions it holds, with the twin's: what the sequence reuses, loads or
// copies is the bytes the model wrote.
func (q *oracleSeq) checkKV() error {
	if _, err := q.wait(-1); err != nil {
		return err
	}
	if err := q.refresh(); err != nil {
		return err
	}
	n := len(q.tokens)
	if n > 0 {
		q.twinLogits(n - 1)
	}
	for l := range q.s.m.layers {
		for h := range q.s.m.kvHeads {
			for p := range n {
				e := q.s.loc[l][h][0][p%q.s.block]
				if t := q.tables[e.slice]; p/q.s.block >= len(t) || t[p/q.s.block] < 0 {
					continue
				}
				k, v, err := q.read(l, h, p)
				if err != nil {
					return err
				}
				q.s.kvSeen.Add(1)
				wk, wv, _ := q.twin.read(l, h, p)
				if !sameBits(k, wk) || !sameBits(v, wv) {
					return q.s.mismatch(fmt.Errorf("oracle: seq %d layer %d head %d position %d: K/V in the cache differ from the no-cache run", q.id, l, h, p))
				}
			}
		}
	}
	return nil
}

// diagnose names the stored K/V, up to position p, that differ from the
// twin's, and where the cache says their units are: what a failure report
// needs to find the operation that served them.
func (q *oracleSeq) diagnose(p int) string {
	out := ""
	seen := map[[2]int]bool{}
	for l := range q.s.m.layers {
		for h := range q.s.m.kvHeads {
			for j := 0; j <= p; j++ {
				e := q.s.loc[l][h][0][j%q.s.block]
				b := j / q.s.block
				if t := q.tables[e.slice]; b >= len(t) || t[b] < 0 || seen[[2]int{b, e.slice}] {
					continue
				}
				k, v, err := q.read(l, h, j)
				if err != nil {
					continue
				}
				wk, wv, _ := q.twin.read(l, h, j)
				if !sameBits(k, wk) || !sameBits(v, wv) {
					seen[[2]int{b, e.slice}] = true
					loc, _ := q.s.c.Locate(q.id, b, e.slice)
					out += fmt.Sprintf("\n\tK/V of position %d (block %d, layer %d, head %d, slice %d) differ; the unit is %+v", j, b, l, h, e.slice, loc)
				}
			}
		}
	}
	return out
}

func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func appendRanges(dst []kvcache.TokenRange, rs ...kvcache.TokenRange) []kvcache.TokenRange {
	for _, r := range rs {
		if r.End > r.Start {
			dst = append(dst, r)
		}
	}
	return dst
}

// rangePositions returns the positions of rs, sorted and without repeats.
func rangePositions(rs []kvcache.TokenRange) []int {
	var pos []int
	for _, r := range rs {
		for p := r.Start; p < r.End; p++ {
			pos = append(pos, p)
		}
	}
	slices.Sort(pos)
	return slices.Compact(pos)
}
