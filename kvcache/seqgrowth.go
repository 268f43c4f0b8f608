package kvcache

// A sequence grows one token at a time for as long as it decodes, so its
// tokens and block tables must grow without an operation ever paying for
// what they already hold: an append-doubled slice copies its whole
// content when it outgrows its capacity (at 128k tokens, half a MiB of
// tokens and a MiB of block tables, under the cache's lock). The tokens
// live in chunks that never move; the block tables, which a kernel reads
// as one contiguous array per slice, move to larger arrays a few slices
// per operation, well before they are full.

// tokenChunk is the fewest tokens in a chunk of a tokenList (a chunk holds
// a whole number of blocks).
const tokenChunk = 1024

// tokenList is a sequence's tokens, in chunks of a whole number of blocks
// (per tokens each), so that the tokens of a block are one slice of one
// chunk. Chunks past the first are allocated whole and never move; the
// first grows by doubling up to per tokens (a bounded copy), so that a
// short sequence stays small.
type tokenList struct {
	chunks [][]uint32
	n, per int
}

// newTokenList returns an empty list for blocks of blockTokens tokens.
func newTokenList(blockTokens int) tokenList {
	return tokenList{per: blockTokens * max(1, tokenChunk/blockTokens)}
}

// len returns the number of tokens.
func (t *tokenList) len() int { return t.n }

// at returns token j.
func (t *tokenList) at(j int) uint32 { return t.chunks[j/t.per][j%t.per] }

// span returns tokens [lo, hi), which must not cross a chunk boundary
// (the tokens of one block never do).
func (t *tokenList) span(lo, hi int) []uint32 {
	return t.chunks[lo/t.per][lo%t.per : lo%t.per+(hi-lo)]
}

// append adds tokens at the end.
func (t *tokenList) append(tokens ...uint32) {
	for len(tokens) > 0 {
		k := t.n / t.per
		if k == len(t.chunks) {
			size := t.per
			if k == 0 {
				size = min(t.per, max(len(tokens), 64))
			}
			t.chunks = append(t.chunks, make([]uint32, 0, size))
		}
		ch := t.chunks[k]
		take := min(len(tokens), t.per-len(ch))
		t.chunks[k] = append(ch, tokens[:take]...)
		t.n += take
		tokens = tokens[take:]
	}
}

// truncate keeps the first n tokens. The chunks keep their capacity.
func (t *tokenList) truncate(n int) {
	if n >= t.n {
		return
	}
	k := n / t.per
	if k < len(t.chunks) {
		t.chunks[k] = t.chunks[k][:n%t.per]
		for i := k + 1; i < len(t.chunks); i++ {
			t.chunks[i] = t.chunks[i][:0]
		}
	}
	t.n = n
}

// appendTo appends the tokens to dst.
func (t *tokenList) appendTo(dst []uint32) []uint32 {
	for _, ch := range t.chunks {
		dst = append(dst, ch...)
	}
	return dst
}

// clone returns a copy of t.
func (t *tokenList) clone() tokenList {
	c := tokenList{per: t.per}
	for _, ch := range t.chunks {
		if len(ch) == 0 {
			break
		}
		c.append(ch...)
	}
	return c
}

// tableStep is the most block-table entries an operation copies into
// larger arrays (see seqTables.resize): 4096 entries, 16 KiB.
const tableStep = 1 << 12

// seqTables is a sequence's block tables: per slice, one GPU slot per
// block (-1 for a unit it does not pin). Each table is one array, which
// BlockTables hands out as it is. A sequence's tables are sized when it
// starts for its prompt and a quarter more, or for Request.MaxTokens; when
// they are three quarters full, each resize copies up to tableStep entries
// into arrays twice as large (next), and the tables switch to them once
// every slice has moved: they double without an operation copying more
// than tableStep entries (or allocating more than one slice's new array),
// unless it adds more blocks than the room left (then it moves what is
// left: an operation that large does that much work anyway).
type seqTables struct {
	cur  [][]int32
	next [][]int32
	// moved counts the slices whose next array holds their table, and
	// part the entries of slice moved copied so far.
	moved, part int
}

// table returns the table of slice sl over n blocks (nil before any).
func (t *seqTables) table(sl, n int) []int32 {
	if t.cur == nil {
		return nil
	}
	return t.cur[sl][:n]
}

// set sets entry i of slice sl's table.
func (t *seqTables) set(sl, i int, v int32) {
	t.cur[sl][i] = v
	if sl < t.moved || (sl == t.moved && i < t.part) {
		t.next[sl][i] = v
	}
}

// reserve sizes empty tables for blocks blocks without moving (a third
// more, before which they do not start to move, and a few).
func (t *seqTables) reserve(slices, blocks int) {
	if t.cur != nil {
		return
	}
	room := blocks + blocks/3 + 8
	back := make([]int32, slices*room)
	t.cur = make([][]int32, slices)
	for sl := range t.cur {
		t.cur[sl] = back[sl*room : sl*room : (sl+1)*room]
	}
}

// resize makes every table n entries long, new entries -1, and moves
// tables into larger arrays as they fill up (see seqTables).
func (t *seqTables) resize(slices, n int) {
	// One array for every slice, with room for a quarter more blocks (a
	// decode adds one every block of tokens): a sequence's tables cost
	// one allocation, and its first decode steps none.
	t.reserve(slices, n+n/4)
	room := cap(t.cur[0])
	if t.next == nil && 4*n > 3*room {
		t.next = make([][]int32, slices)
		t.moved, t.part = 0, 0
	}
	if t.next != nil {
		t.move(slices, n, room)
	}
	for sl := range t.cur {
		t.cur[sl] = fit(t.cur[sl], n)
		if sl < t.moved {
			t.next[sl] = fit(t.next[sl], n)
		}
	}
	if t.next != nil && t.part > n {
		// The slice being moved was cut: what it had copied past n is
		// gone too.
		t.next[t.moved] = t.next[t.moved][:n]
		t.part = n
	}
}

// move copies up to tableStep entries of the tables into their next
// arrays, or all that is left when n blocks do not fit the current ones,
// and switches to the next arrays once every slice has moved.
func (t *seqTables) move(slices, n, room int) {
	budget := tableStep
	for t.moved < slices && (budget > 0 || n > room) {
		old := t.cur[t.moved]
		if t.part == 0 {
			t.next[t.moved] = make([]int32, 0, max(2*room, n+n/4+8))
		}
		end := len(old)
		if n <= room {
			end = min(end, t.part+budget)
		}
		t.next[t.moved] = append(t.next[t.moved], old[t.part:end]...)
		budget -= end - t.part
		t.part = end
		if t.part == len(old) {
			t.moved++
			t.part = 0
		}
	}
	if t.moved == slices {
		t.cur, t.next, t.moved, t.part = t.next, nil, 0, 0
	}
}

// fit returns tb with length n: cut, or extended with -1.
func fit(tb []int32, n int) []int32 {
	if len(tb) >= n {
		return tb[:n]
	}
	for len(tb) < n {
		tb = append(tb, -1)
	}
	return tb
}
