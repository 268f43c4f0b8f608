package radix

import "fmt"

// Keys are the sequence-wide inputs, besides tokens, that decide whether two
// sequences may share KV. They enter the hash of a sequence's first block and
// are verified on the first block of every match, so sequences with different
// Keys never share a node. The zero value means "no namespace, base model".
type Keys struct {
	// Namespace isolates tenants (vLLM's cache_salt): sequences in different
	// namespaces never share a block, whatever their tokens.
	Namespace string
	// LoRA identifies the adapter the KV was computed with; empty for the
	// base model.
	LoRA string
}

// ExtraKey is one opaque key, besides the tokens, that a block's KV depends
// on: for example the content hash of a multimodal item whose placeholder
// tokens start at Pos. A key belongs to the block that holds position Pos and
// enters that block's hash with its offset inside the block. Later blocks
// inherit it through the chain, so an item spanning several blocks needs one
// key at its first position. Slices of ExtraKey passed to this package hold
// the keys of a whole sequence, sorted by Pos; keys at the same Pos are
// compared in the order given.
type ExtraKey struct {
	// Pos is the index, in the whole sequence, of the token the key is
	// attached to. It must not be negative.
	Pos int
	// Value is the opaque key, such as a multimodal item hash.
	Value uint64
}

// checkExtra reports whether extra is a valid list of keys: non-negative
// positions in non-decreasing order. Checking the whole list up front keeps
// the block loops simple and the cursor in takeExtra correct.
func checkExtra(extra []ExtraKey) error {
	prev := 0
	for i, x := range extra {
		if x.Pos < 0 {
			return fmt.Errorf("%w: key %d has negative position %d", ErrInvalidExtraKey, i, x.Pos)
		}
		if x.Pos < prev {
			return fmt.Errorf("%w: key %d at position %d follows position %d (keys must be sorted by position)",
				ErrInvalidExtraKey, i, x.Pos, prev)
		}
		prev = x.Pos
	}
	return nil
}

// takeExtra returns the keys of extra whose position lies in [start, end),
// advancing *cursor past them. Keys before start are skipped: they belong to
// blocks already consumed. The cursor makes a pass over all blocks of a
// sequence linear in the number of keys.
func takeExtra(extra []ExtraKey, cursor *int, start, end int) []ExtraKey {
	i := *cursor
	for i < len(extra) && extra[i].Pos < start {
		i++
	}
	j := i
	for j < len(extra) && extra[j].Pos < end {
		j++
	}
	*cursor = j
	if i == j {
		return nil
	}
	return extra[i:j]
}

// extraEqual reports whether two key lists are equal element by element.
func extraEqual(a, b []ExtraKey) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
