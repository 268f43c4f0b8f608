package main

// bound is what an unlimited cache would reuse, counted directly over the
// trace's ids without kvcache: the reference the simulation is checked
// against and the ceiling every policy and capacity stays under.
type bound struct {
	requests, blocks, blockHits int
	tokens, tokenHits           int64
}

// unlimitedBound counts, in file order, the blocks of each request that an
// earlier request already had. Ids are chained, so a seen id implies its
// whole prefix was seen; the count still stops at the first unseen id of a
// request, which is what a longest-prefix match does, so that it stays right
// even for a trace whose ids are not chained.
func unlimitedBound(reqs []request) bound {
	seen := make(map[uint64]struct{})
	var b bound
	for _, r := range reqs {
		b.requests++
		b.blocks += len(r.HashIDs)
		b.tokens += int64(r.InputLength)
		hits := 0
		for _, id := range r.HashIDs {
			if _, ok := seen[id]; !ok {
				break
			}
			hits++
		}
		b.blockHits += hits
		b.tokenHits += int64(hitTokens(r, hits))
		for _, id := range r.HashIDs {
			seen[id] = struct{}{}
		}
	}
	return b
}

// hitTokens is the number of prompt tokens in the first hits blocks of r,
// the last block counted at its real length.
func hitTokens(r request, hits int) int {
	if hits == len(r.HashIDs) {
		return r.InputLength
	}
	return hits * traceBlockTokens
}
