package layout

// The presets are functions, not variables, so that no caller can change
// another caller's model: each call returns a fresh value.

// SeedModel returns the model of the seed document: 28 layers, 16 query and
// 8 KV heads (GQA, group of 2), head dimension 1024, bf16 (2 bytes).
func SeedModel() Model {
	return Model{Name: "seed", Layers: 28, QueryHeads: 16, KVHeads: 8, HeadDim: 1024, ElemBytes: 2}
}

// Llama2_13B returns Llama-2-13B: 40 layers, 40 query and 40 KV heads (MHA),
// head dimension 128, fp16.
func Llama2_13B() Model {
	return Model{Name: "Llama-2-13B", Layers: 40, QueryHeads: 40, KVHeads: 40, HeadDim: 128, ElemBytes: 2}
}

// DeepSeekV2 returns DeepSeek-V2 with MLA: 60 layers, 128 heads of
// dimension 128 (qk_nope_head_dim = v_head_dim = 128), and per token and
// layer one latent of kv_lora_rank 512 plus qk_rope_head_dim 64 = 576
// elements, bf16. KVHeads and HeadDim describe the decompressed attention;
// the cache stores only the latent.
func DeepSeekV2() Model {
	return Model{
		Name: "DeepSeek-V2", Layers: 60, QueryHeads: 128, KVHeads: 128, HeadDim: 128, ElemBytes: 2,
		MLALatentDims: 512, MLARopeDims: 64,
	}
}

// Llama31_405B returns Llama-3.1-405B, the 405B-class model: 126 layers, 128
// query and 8 KV heads (GQA, group of 16), head dimension 128, bf16.
func Llama31_405B() Model {
	return Model{Name: "Llama-3.1-405B", Layers: 126, QueryHeads: 128, KVHeads: 8, HeadDim: 128, ElemBytes: 2}
}
