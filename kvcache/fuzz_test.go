package kvcache

import (
	"errors"
	"testing"
)

// FuzzOperations drives the model-based harness with operations chosen by
// the fuzzer's bytes: every choice the randomized test makes with a PRNG is
// read from the input instead, and every invariant is checked after every
// step. The configuration byte's high bit wraps the policies in chaos
// policies (broken contracts and panics, see chaosPolicy); the harness
// injects Mover failures and panics either way. Bit 0x40 runs the cache
// with a TransferEngine instead (modelConfig.async): the fuzzer's bytes
// then also choose when transfers complete and which fail.
func FuzzOperations(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(1), []byte("acquire append release truncate fork sparse"))
	f.Add(uint8(2), []byte{30, 30, 30, 60, 60, 90, 90, 1, 2, 3, 4, 5, 99, 99, 50, 50})
	f.Add(uint8(4), []byte{255, 0, 255, 0, 128, 64, 32, 16, 8, 4, 2, 1})
	f.Add(uint8(0x81), []byte("chaos: a policy that breaks its contract now and then"))
	f.Add(uint8(0x40), []byte("transfers in flight, completed out of order, some failing"))
	f.Add(uint8(0x4a), []byte{0, 0, 0, 1, 2, 3, 30, 60, 90, 5, 5, 5, 0, 0, 200, 100, 7, 3})
	configs := modelConfigs()
	// Seeds for the configurations of three and four tiers.
	for i, mc := range configs {
		if mc.third != (Capacity{}) {
			f.Add(uint8(i), []byte("moves down and loads back from below the CPU"))
			f.Add(uint8(i)|0x80, []byte{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 200, 100, 50})
		}
	}
	f.Fuzz(func(t *testing.T, config uint8, data []byte) {
		mc := configs[int(config&0x3f)%len(configs)]
		if config&0x80 != 0 {
			mc.chaos = 40
		}
		mc.async = config&0x40 != 0
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
		for pos < len(data) && h.steps < 300 && h.poisoned == nil {
			h.step()
			h.checkAll()
		}
		for len(h.order) > 0 && h.poisoned == nil {
			id := h.order[0]
			if err := h.c.Release(id); err != nil {
				if !errors.Is(err, ErrPolicy) {
					t.Fatal(err)
				}
				h.notePoisoned(err)
				h.checkAll()
				break
			}
			h.forget(id)
			h.checkAll()
		}
		if h.engine != nil && h.poisoned == nil {
			h.drain()
			h.checkAll()
		}
	})
}
