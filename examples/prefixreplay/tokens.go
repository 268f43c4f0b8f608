package main

// The trace gives block ids, kvcache wants tokens. Each block's 512 tokens
// are made from its id alone, so equal ids give equal blocks and, because the
// ids are chained, equal id sequences give equal prompts. The first two
// tokens are the id itself, which makes the map from id to block injective:
// two different ids never give the same tokens, so the token-verified prefix
// tree shares exactly what the trace shares. The other 510 tokens are filler
// that varies with the id and the seed (so the blocks look like text, not
// runs of one value) at the cost of one multiply-add per token.

// fillBlock writes the tokens of block id into dst (len traceBlockTokens).
func fillBlock(dst []uint32, id, seed uint64) {
	dst[0] = uint32(id)
	dst[1] = uint32(id >> 32)
	x := mix64(id ^ seed)
	for j := 2; j < len(dst); j++ {
		x += 0x9e3779b97f4a7c15
		dst[j] = uint32(x >> 32)
	}
}

// promptTokens appends the tokens of r's blocks to dst: every block full,
// the last one included (see simulate).
func promptTokens(dst []uint32, r request, seed uint64) []uint32 {
	n := len(r.HashIDs) * traceBlockTokens
	if cap(dst) < n {
		dst = make([]uint32, n)
	}
	dst = dst[:n]
	for i, id := range r.HashIDs {
		fillBlock(dst[i*traceBlockTokens:(i+1)*traceBlockTokens], id, seed)
	}
	return dst
}

// mix64 is the SplitMix64 finalizer: a bijection that spreads the bits of x.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
