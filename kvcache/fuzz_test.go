package kvcache

import (
	"testing"
)

// FuzzOperations drives the model-based harness with operations chosen by
// the fuzzer's bytes: every choice the randomized test makes with a PRNG is
// read from the input instead, and every invariant is checked after every
// step.
func FuzzOperations(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(1), []byte("acquire append release truncate fork sparse"))
	f.Add(uint8(2), []byte{30, 30, 30, 60, 60, 90, 90, 1, 2, 3, 4, 5, 99, 99, 50, 50})
	f.Add(uint8(4), []byte{255, 0, 255, 0, 128, 64, 32, 16, 8, 4, 2, 1})
	configs := modelConfigs()
	f.Fuzz(func(t *testing.T, config uint8, data []byte) {
		mc := configs[int(config)%len(configs)]
		pos := 0
		choose := func(n int) int {
			if n <= 1 {
				return 0
			}
			if pos >= len(data) {
				pos++
				return pos % n
			}
			v := int(data[pos])
			pos++
			return v % n
		}
		h := newHarness(t, mc, choose)
		h.checkAll()
		for pos < len(data) && h.steps < 300 {
			h.step()
			h.checkAll()
		}
		for len(h.order) > 0 {
			id := h.order[0]
			if err := h.c.Release(id); err != nil {
				t.Fatal(err)
			}
			h.forget(id)
			h.checkAll()
		}
	})
}
