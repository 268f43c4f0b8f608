// Package layout describes the geometry of a transformer's KV cache and the
// shapes of the units a tiered cache stores, moves and evicts.
//
// A [Model] records what decides the size of the KV cache: layers, query and
// KV heads (MHA, GQA, MQA), head dimension, element size, multi-head latent
// attention (MLA: one latent vector per token and layer), cross-layer
// attention (CLA: several consecutive layers share one KV), and per-layer
// sliding windows.
//
// A [Layout] cuts the KV of one token block (TokensPerUnit consecutive tokens)
// into units, one per slice of the model:
//
//   - [AllLayers] (TensorRT-LLM): one unit holds every KV layer of the block,
//     shaped [layer][K,V][kv_head][token][dim]. Layers with different
//     windows go into different units, one per window, because TensorRT-LLM
//     keeps one pool per window size.
//   - [PagedLayer] (vLLM, Pensieve): one unit per KV layer, shaped
//     [token][K,V][kv_head][dim].
//   - [BSA] (block-sparse attention, MoBA): one unit per KV layer and KV head,
//     shaped [token][K,V][dim].
//
// A Layout answers what a cache and a kernel need: unit bytes, units per
// token block, which KV layer and head a slice holds, where an element lies
// inside a unit ([Layout.Locate], [Layout.Strides]), how many units and bytes
// a sequence of N tokens holds ([Layout.Footprint]), which units a sparse
// block selection touches ([Layout.AppendTouched], [Layout.Touched]), and how
// slices group into pools of equal unit size and window ([Layout.Pools]).
//
// Everything here is a pure function of its inputs: a Layout never changes
// after [New] returns it and is safe for concurrent use. Bad input returns an
// error that matches one of the package's sentinel errors with errors.Is;
// sizes are computed in int64 with overflow checks and report [ErrOverflow]
// rather than wrap. A Model's sizes are also bounded ([MaxLayers],
// [MaxHeads], [MaxVectorDims], [MaxElemBytes], [MaxUnitsPerBlock]) far
// above any real model, so that the tables a cache sizes by a Layout (per
// layer, per slice) stay small.
package layout
