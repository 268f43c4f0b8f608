package kvcache_test

import (
	"math"
	"math/rand/v2"
	"slices"
)

// tinyModel is a deterministic decoder-only transformer small enough to run
// thousands of requests in a test: float32 weights drawn from a seeded
// generator, RMS normalisation, grouped-query attention with per-layer
// sliding windows, a residual tanh feed-forward and tied embeddings. Every sum
// runs in one fixed order, so the same token at the same position with the
// same K/V before it gives the same bits, whether those K/V come from a
// cache's slots or from a plain array: that is what the oracle compares.
//
// The model reads and writes K/V only through a kvAccess, so the code that
// computes a token is one function for both runs.
type tinyModel struct {
	layers, qHeads, kvHeads, headDim, dim, vocab int
	windows                                      []int // per layer, 0 = full attention
	// cla is the number of consecutive layers that share one KV
	// (cross-layer attention): the first of them writes it.
	cla                int
	emb                []float32
	wq, wk, wv, wo, w1 [][]float32 // per layer
	// latent, when positive, makes the layers multi-head latent attention
	// (MLA): a token stores one vector of latent dimensions per layer
	// (kvHeads is then 1), its projection by wdkv, from which every query
	// head derives its K and V by the up-projections wuk and wuv.
	latent         int
	wdkv, wuk, wuv [][]float32 // per layer
	// sparse, when not nil, marks the layers with block-sparse attention
	// (see selected): each stored KV head of such a layer reads only the
	// blocks of block tokens its selection names.
	sparse []bool
	block  int
}

// kvAccess is where a forward pass keeps K/V. read returns the K and V
// vectors of head h of layer l at position p (under MLA, the latent vector
// and nil); write stores those of the position being computed. Either may fail (a slot the block tables do not
// give, a write outside the ranges to compute): the pass stops with the error.
type kvAccess interface {
	read(l, h, p int) (k, v []float32, err error)
	write(l, h, p int, k, v []float32) error
}

func newTinyModel(seed uint64, layers, qHeads, kvHeads, headDim, vocab int, windows []int) *tinyModel {
	r := rand.New(rand.NewPCG(seed, 0x6b76746965720a))
	dim := qHeads * headDim
	m := &tinyModel{layers: layers, qHeads: qHeads, kvHeads: kvHeads, headDim: headDim,
		dim: dim, vocab: vocab, windows: windows, cla: 1}
	fill := func(n int, scale float32) []float32 {
		w := make([]float32, n)
		for i := range w {
			w[i] = (r.Float32()*2 - 1) * scale
		}
		return w
	}
	s := float32(1 / math.Sqrt(float64(dim)))
	m.emb = fill(vocab*dim, 1)
	for range layers {
		m.wq = append(m.wq, fill(dim*qHeads*headDim, s))
		m.wk = append(m.wk, fill(dim*kvHeads*headDim, s))
		m.wv = append(m.wv, fill(dim*kvHeads*headDim, s))
		m.wo = append(m.wo, fill(qHeads*headDim*dim, s))
		m.w1 = append(m.w1, fill(dim*dim, s))
	}
	return m
}

// withMLA turns m into a multi-head latent attention model whose tokens
// store latent dimensions per layer, with up-projections drawn from seed.
func (m *tinyModel) withMLA(seed uint64, latent int) *tinyModel {
	r := rand.New(rand.NewPCG(seed, 0x6d6c61))
	fill := func(n int, scale float32) []float32 {
		w := make([]float32, n)
		for i := range w {
			w[i] = (r.Float32()*2 - 1) * scale
		}
		return w
	}
	m.latent, m.kvHeads = latent, 1
	for range m.layers {
		m.wdkv = append(m.wdkv, fill(m.dim*latent, float32(1/math.Sqrt(float64(m.dim)))))
		m.wuk = append(m.wuk, fill(latent*m.qHeads*m.headDim, float32(1/math.Sqrt(float64(latent)))))
		m.wuv = append(m.wuv, fill(latent*m.qHeads*m.headDim, float32(1/math.Sqrt(float64(latent)))))
	}
	return m
}

// storedDims returns the dimensions of the K and the V vector a token
// stores per KV head (under MLA: the latent vector, and no V).
func (m *tinyModel) storedDims() (k, v int) {
	if m.latent > 0 {
		return m.latent, 0
	}
	return m.headDim, m.headDim
}

// kvAt returns the K and V vectors query head qh of layer l reads at
// position j: its KV head's, or under MLA the up-projections of the
// stored latent vector (summed in index order).
func (m *tinyModel) kvAt(kv kvAccess, l, qh, j int) (k, v []float32, err error) {
	if m.latent == 0 {
		return kv.read(l, qh/(m.qHeads/m.kvHeads), j)
	}
	c, _, err := kv.read(l, 0, j)
	if err != nil {
		return nil, nil, err
	}
	n := m.qHeads * m.headDim
	up := func(w []float32) []float32 {
		out := make([]float32, m.headDim)
		for d := range out {
			var acc float32
			for i, ci := range c {
				acc += ci * w[i*n+qh*m.headDim+d]
			}
			out[d] = acc
		}
		return out
	}
	return up(m.wuk[l]), up(m.wuv[l]), nil
}

// matvec returns x·w for w of shape [len(x)][n], summing in index order.
func matvec(dst, x, w []float32, n int) []float32 {
	dst = dst[:0]
	for j := range n {
		var acc float32
		for i, xi := range x {
			acc += xi * w[i*n+j]
		}
		dst = append(dst, acc)
	}
	return dst
}

func rmsNorm(dst, x []float32) []float32 {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	inv := float32(1 / math.Sqrt(float64(ss/float32(len(x))+1e-6)))
	dst = dst[:0]
	for _, v := range x {
		dst = append(dst, v*inv)
	}
	return dst
}

// embed returns the model's input at position p: tok's embedding plus a
// positional term, plus a term drawn from salt when it is not 0. The salt
// stands for what a block's KV depends on besides its tokens: a LoRA
// adapter (every position) or a multimodal item (its placeholder's
// position), so that KV shared across different ones would change the
// outputs.
func (m *tinyModel) embed(p int, tok uint32, salt uint64) []float32 {
	x := make([]float32, m.dim)
	e := m.emb[int(tok)%m.vocab*m.dim:]
	for i := range x {
		x[i] = e[i] + float32(math.Sin(float64(p+1)*float64(i+1)*0.013))
		if salt != 0 {
			x[i] += float32(int64((salt*uint64(i+1)*0x9E3779B97F4A7C15)>>40)%1000) / 2000
		}
	}
	return x
}

// layer runs layer l of the token at position p on its hidden state x (in
// place): it writes the token's K/V through kv (unless write is false: a
// token whose K/V is stored already), then attends over the window ending at
// p, reading every position's K/V, its own included, through kv (in a
// sparse layer, only those of the blocks its KV head selects at p). The
// result depends only on x and on the K/V of positions up to p, so running
// the positions of a prefill one by one or layer by layer gives the same
// bits.
func (m *tinyModel) layer(kv kvAccess, l, p int, x []float32, write bool) error {
	h := rmsNorm(nil, x)
	if write {
		if err := m.writeKV(kv, l, p, h); err != nil {
			return err
		}
	}
	q := matvec(nil, h, m.wq[l], m.qHeads*m.headDim)
	first := 0
	if w := m.windows[l]; w > 0 && p-w+1 > 0 {
		first = p - w + 1
	}
	scale := float32(1 / math.Sqrt(float64(m.headDim)))
	attn := make([]float32, 0, m.qHeads*m.headDim)
	scores := make([]float32, 0, p-first+1)
	vs := make([][]float32, 0, p-first+1)
	for qh := range m.qHeads {
		qv := q[qh*m.headDim : (qh+1)*m.headDim]
		scores, vs = scores[:0], vs[:0]
		maxS := float32(math.Inf(-1))
		var sel []int
		if m.sparse != nil && m.sparse[l] {
			sel = m.selected(l, m.storedHead(qh), p)
		}
		for j := first; j <= p; j++ {
			if sel != nil && !slices.Contains(sel, j/m.block) {
				continue
			}
			kj, vj, err := m.kvAt(kv, l, qh, j)
			if err != nil {
				return err
			}
			vs = append(vs, vj)
			var s float32
			for d := range qv {
				s += qv[d] * kj[d]
			}
			s *= scale
			scores = append(scores, s)
			maxS = max(maxS, s)
		}
		var sum float32
		for i, s := range scores {
			scores[i] = float32(math.Exp(float64(s - maxS)))
			sum += scores[i]
		}
		o := make([]float32, m.headDim)
		for i, vj := range vs {
			w := scores[i] / sum
			for d := range o {
				o[d] += w * vj[d]
			}
		}
		attn = append(attn, o...)
	}
	out := matvec(nil, attn, m.wo[l], m.dim)
	for i := range x {
		x[i] += out[i]
	}
	h = rmsNorm(h, x)
	ff := matvec(nil, h, m.w1[l], m.dim)
	for i := range x {
		x[i] += float32(math.Tanh(float64(ff[i])))
	}
	return nil
}

// writeKV computes the K/V of the token at position p in layer l from its
// normalised hidden state h and writes them through kv, unless the layer
// reads the K/V of an earlier one (cross-layer attention).
func (m *tinyModel) writeKV(kv kvAccess, l, p int, h []float32) error {
	if l%m.cla != 0 {
		return nil
	}
	if m.latent > 0 {
		return kv.write(l, 0, p, matvec(nil, h, m.wdkv[l], m.latent), nil)
	}
	k := matvec(nil, h, m.wk[l], m.kvHeads*m.headDim)
	v := matvec(nil, h, m.wv[l], m.kvHeads*m.headDim)
	for kh := range m.kvHeads {
		lo, hi := kh*m.headDim, (kh+1)*m.headDim
		if err := kv.write(l, kh, p, k[lo:hi], v[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// storedHead returns the stored KV head query head qh reads: its GQA
// group's, or the one latent head under MLA.
func (m *tinyModel) storedHead(qh int) int {
	if m.latent > 0 {
		return 0
	}
	return qh / (m.qHeads / m.kvHeads)
}

// selected returns the blocks stored KV head h of sparse layer l reads at
// position p: the first block (the attention sink), the block of p and
// the one before it, and one drawn by a hash of (p, l, h). It depends on
// nothing else (the block count at p is p/block+1), so recomputing a token
// later, to restore its K/V, selects what its first computation did.
func (m *tinyModel) selected(l, h, p int) []int {
	pb := p / m.block
	z := uint64(p+1)*0x9E3779B97F4A7C15 ^ uint64(l+1)*0xBF58476D1CE4E5B9 ^ uint64(h+1)*0x94D049BB133111EB
	z ^= z >> 31
	z *= 0xD6E8FEB86659FD93
	z ^= z >> 32
	sel := []int{0, pb, int(z % uint64(pb+1))}
	if pb > 0 {
		sel = append(sel, pb-1)
	}
	return sel
}

// logits returns the output of the last layer's hidden state x (tied
// embeddings: one dot product per vocabulary entry).
func (m *tinyModel) logits(x []float32) []float32 {
	h := rmsNorm(nil, x)
	out := make([]float32, m.vocab)
	for t := range out {
		row := m.emb[t*m.dim : (t+1)*m.dim]
		var acc float32
		for i, hi := range h {
			acc += hi * row[i]
		}
		out[t] = acc
	}
	return out
}

// forward computes the token at position p through every layer and returns
// its logits (see layer for write).
func (m *tinyModel) forward(kv kvAccess, p int, tok uint32, salt uint64, write bool) ([]float32, error) {
	x := m.embed(p, tok, salt)
	for l := range m.layers {
		if err := m.layer(kv, l, p, x, write); err != nil {
			return nil, err
		}
	}
	return m.logits(x), nil
}

// argmax returns the index of the largest logit, the first on ties.
func argmax(logits []float32) uint32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return uint32(best)
}

// twinKV is the no-cache run's K/V: one plain array per layer and head,
// indexed by position.
type twinKV struct {
	m    *tinyModel
	k, v [][][]float32 // [layer][head][position]
}

func newTwinKV(m *tinyModel) *twinKV {
	t := &twinKV{m: m, k: make([][][]float32, m.layers), v: make([][][]float32, m.layers)}
	for l := range m.layers {
		t.k[l] = make([][]float32, m.kvHeads)
		t.v[l] = make([][]float32, m.kvHeads)
	}
	return t
}

func (t *twinKV) read(l, h, p int) ([]float32, []float32, error) {
	kd, vd := t.m.storedDims()
	l /= t.m.cla
	return t.k[l][h][p*kd : (p+1)*kd], t.v[l][h][p*vd : (p+1)*vd], nil
}

func (t *twinKV) write(l, h, p int, k, v []float32) error {
	kd, vd := t.m.storedDims()
	l /= t.m.cla
	t.k[l][h] = append(t.k[l][h][:p*kd], k...)
	t.v[l][h] = append(t.v[l][h][:p*vd], v...)
	return nil
}
