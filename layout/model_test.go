package layout

import (
	"errors"
	"testing"
)

func TestKVHeadOf(t *testing.T) {
	m := SeedModel() // 16 query heads over 8 KV heads
	for q, want := range map[int]int{0: 0, 1: 0, 2: 1, 15: 7} {
		h, err := m.KVHeadOf(q)
		if err != nil || h != want {
			t.Errorf("KVHeadOf(%d) = %d, %v; want %d", q, h, err, want)
		}
	}
	for _, q := range []int{-1, 16} {
		if _, err := m.KVHeadOf(q); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("KVHeadOf(%d): %v, want ErrOutOfRange", q, err)
		}
	}
	mla := DeepSeekV2()
	if h, err := mla.KVHeadOf(mla.QueryHeads - 1); err != nil || h != 0 {
		t.Errorf("MLA KVHeadOf = %d, %v; want 0 (one latent)", h, err)
	}
	bad := m
	bad.KVHeads = 3
	if _, err := bad.KVHeadOf(0); !errors.Is(err, ErrInvalidModel) {
		t.Errorf("16 over 3 heads: %v, want ErrInvalidModel", err)
	}
}
