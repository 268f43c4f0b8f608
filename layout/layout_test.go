package layout

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// windowed is a small model with three window sizes: full in layers 0 and
// 3, 64 tokens in layers 1, 2 and 5, 128 tokens in layer 4.
func windowed() Model {
	return Model{
		Name: "windowed", Layers: 6, QueryHeads: 4, KVHeads: 2, HeadDim: 16, ElemBytes: 2,
		Windows: []int{0, 64, 64, 0, 128, 64},
	}
}

func TestSliceCounts(t *testing.T) {
	m := SeedModel()
	assert.Equal(t, 1, mustNew(t, m, AllLayers, 32).UnitsPerBlock())
	assert.Equal(t, 28, mustNew(t, m, PagedLayer, 32).UnitsPerBlock())
	assert.Equal(t, 28*8, mustNew(t, m, BSA, 32).UnitsPerBlock())
	// MLA has one stored head: BSA has one unit per KV layer.
	assert.Equal(t, 60, mustNew(t, DeepSeekV2(), BSA, 64).UnitsPerBlock())

	// Whatever the kind, a token block holds the same bytes.
	for _, m := range []Model{SeedModel(), DeepSeekV2(), windowed()} {
		var blockBytes []int64
		for _, kind := range Kinds() {
			l := mustNew(t, m, kind, 32)
			sum := int64(0)
			for i := range l.UnitsPerBlock() {
				s, err := l.Slice(i)
				require.NoError(t, err)
				sum += s.UnitBytes
			}
			assert.Equal(t, l.BlockBytes(), sum)
			blockBytes = append(blockBytes, sum)
		}
		assert.Equal(t, blockBytes[0], blockBytes[1], m.Name)
		assert.Equal(t, blockBytes[0], blockBytes[2], m.Name)
	}
}

func TestSliceMapping(t *testing.T) {
	m := SeedModel()
	m.CLAFactor = 4 // 7 KV layers
	for _, kind := range Kinds() {
		l := mustNew(t, m, kind, 16)
		covered := map[[2]int]int{}
		for i := range l.UnitsPerBlock() {
			s, err := l.Slice(i)
			require.NoError(t, err)
			assert.Equal(t, i, s.Index)
			layers, err := l.AppendKVLayers(nil, i)
			require.NoError(t, err)
			assert.Len(t, layers, s.KVLayers)
			if s.KVLayer >= 0 {
				assert.Equal(t, []int{s.KVLayer}, layers)
			}
			heads := []int{s.KVHead}
			if s.KVHead < 0 {
				heads = nil
				for h := range m.StoredHeads() {
					heads = append(heads, h)
				}
			}
			for _, k := range layers {
				for _, h := range heads {
					covered[[2]int{k, h}]++
					got, err := l.SliceOf(k, h)
					require.NoError(t, err)
					assert.Equal(t, i, got, "%v: SliceOf(%d, %d)", kind, k, h)
				}
			}
		}
		// Every (KV layer, KV head) lives in exactly one slice.
		assert.Len(t, covered, 7*8, "%v", kind)
		for key, n := range covered {
			assert.Equal(t, 1, n, "%v: %v", kind, key)
		}
	}
}

func TestCrossLayerMapping(t *testing.T) {
	m := Model{Layers: 7, QueryHeads: 2, KVHeads: 1, HeadDim: 4, ElemBytes: 2, CLAFactor: 3}
	require.Equal(t, 3, m.KVLayers())
	wantKV := []int{0, 0, 0, 1, 1, 1, 2}
	for layer, want := range wantKV {
		got, err := m.KVLayerOf(layer)
		require.NoError(t, err)
		assert.Equal(t, want, got, "layer %d", layer)
		first, count, err := m.ServedLayers(got)
		require.NoError(t, err)
		assert.True(t, first <= layer && layer < first+count, "layer %d in [%d, %d)", layer, first, first+count)
	}
	// CLAFactor 0 and 1 both mean no sharing; a factor beyond the depth
	// leaves a single KV layer.
	for factor, want := range map[int]int{0: 7, 1: 7, 7: 1, 100: 1} {
		m.CLAFactor = factor
		assert.Equal(t, want, m.KVLayers(), "factor %d", factor)
	}
}

func TestWindowsAndPools(t *testing.T) {
	m := windowed()
	paged := mustNew(t, m, PagedLayer, 32)
	layerBytes := int64(32 * 2 * 2 * 16 * 2)
	assert.Equal(t, []Pool{
		{Index: 0, UnitBytes: layerBytes, Window: 0, UnitsPerBlock: 2},
		{Index: 1, UnitBytes: layerBytes, Window: 64, UnitsPerBlock: 3},
		{Index: 2, UnitBytes: layerBytes, Window: 128, UnitsPerBlock: 1},
	}, paged.Pools())
	wantPool := []int{0, 1, 1, 0, 2, 1}
	for i, want := range wantPool {
		s, err := paged.Slice(i)
		require.NoError(t, err)
		assert.Equal(t, want, s.Pool, "slice %d", i)
		assert.Equal(t, m.Windows[i], s.Window)
	}

	bsa := mustNew(t, m, BSA, 32)
	pools := bsa.Pools()
	require.Len(t, pools, 3)
	assert.Equal(t, []int{4, 6, 2}, []int{pools[0].UnitsPerBlock, pools[1].UnitsPerBlock, pools[2].UnitsPerBlock})
	assert.Equal(t, layerBytes/2, pools[0].UnitBytes)
	s, err := bsa.Slice(5) // KV layer 2, head 1
	require.NoError(t, err)
	assert.Equal(t, [4]int{2, 1, 1, 64}, [4]int{s.KVLayer, s.KVHead, s.Pool, s.Window})

	all := mustNew(t, m, AllLayers, 32)
	assert.Equal(t, []Pool{
		{Index: 0, UnitBytes: 2 * layerBytes, Window: 0, UnitsPerBlock: 1},
		{Index: 1, UnitBytes: 3 * layerBytes, Window: 64, UnitsPerBlock: 1},
		{Index: 2, UnitBytes: 1 * layerBytes, Window: 128, UnitsPerBlock: 1},
	}, all.Pools())
	for slice, want := range [][]int{{0, 3}, {1, 2, 5}, {4}} {
		got, err := all.AppendKVLayers([]int{-7}, slice)
		require.NoError(t, err)
		assert.Equal(t, append([]int{-7}, want...), got)
	}
}

// TestPoolsGroupEqualUnits checks the pool contract on every kind: slices
// share a pool exactly when their unit bytes and windows are equal.
func TestPoolsGroupEqualUnits(t *testing.T) {
	for _, kind := range Kinds() {
		l := mustNew(t, windowed(), kind, 16)
		pools := l.Pools()
		counts := make([]int, len(pools))
		for i := range l.UnitsPerBlock() {
			s, err := l.Slice(i)
			require.NoError(t, err)
			counts[s.Pool]++
			assert.Equal(t, pools[s.Pool].UnitBytes, s.UnitBytes)
			assert.Equal(t, pools[s.Pool].Window, s.Window)
		}
		for p, pool := range pools {
			assert.Equal(t, p, pool.Index)
			assert.Equal(t, pool.UnitsPerBlock, counts[p], "%v pool %d", kind, p)
			for q := range p {
				assert.False(t, pools[q].UnitBytes == pool.UnitBytes && pools[q].Window == pool.Window,
					"%v: pools %d and %d should be one", kind, q, p)
			}
		}
	}
}

func TestWindowUnderCrossLayerSharing(t *testing.T) {
	m := Model{Layers: 5, QueryHeads: 2, KVHeads: 2, HeadDim: 4, ElemBytes: 1, CLAFactor: 2,
		Windows: []int{64, 0, 64, 128, 32}}
	want := []int{0, 128, 32} // full wins; otherwise the widest
	for k, w := range want {
		got, err := m.KVWindow(k)
		require.NoError(t, err)
		assert.Equal(t, w, got, "KV layer %d", k)
	}
	l := mustNew(t, m, PagedLayer, 8)
	assert.Len(t, l.Pools(), 3)
}

// TestHeldBlocksAgainstTokenScan compares HeldBlocks and Footprint with a
// scan over token positions: a block is held when any of its tokens is in
// the window.
func TestHeldBlocksAgainstTokenScan(t *testing.T) {
	m := windowed()
	for _, unit := range []int{2, 8, 32, 64, 256} {
		l := mustNew(t, m, PagedLayer, unit)
		for tokens := int64(0); tokens <= 700; tokens += 7 {
			var want Usage
			for i := range l.UnitsPerBlock() {
				s, err := l.Slice(i)
				require.NoError(t, err)
				held := map[int64]bool{}
				for pos := range tokens {
					if s.Window == 0 || pos >= tokens-int64(s.Window) {
						held[pos/int64(unit)] = true
					}
				}
				first, end, err := l.HeldBlocks(i, tokens)
				require.NoError(t, err)
				require.Equal(t, int64(len(held)), end-first, "unit %d tokens %d slice %d", unit, tokens, i)
				for b := first; b < end; b++ {
					require.True(t, held[b])
				}
				want.Units += int64(len(held))
				want.Bytes += int64(len(held)) * s.UnitBytes
			}
			got, err := l.Footprint(tokens)
			require.NoError(t, err)
			require.Equal(t, want, got, "unit %d tokens %d", unit, tokens)
		}
	}
	// A 64-token window over 32-token pages holds at most 3 pages.
	l := mustNew(t, m, PagedLayer, 32)
	first, end, err := l.HeldBlocks(1, 1000)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{29, 32}, [2]int64{first, end})
}

func TestLayoutKeepsItsOwnModel(t *testing.T) {
	m := windowed()
	l := mustNew(t, m, PagedLayer, 32)
	m.Windows[0] = 4096
	assert.Equal(t, 0, l.Model().Windows[0], "caller's edit after New")
	got := l.Model()
	got.Windows[1] = 1
	assert.Equal(t, 64, l.Model().Windows[1], "edit of a returned model")
	pools := l.Pools()
	pools[0].UnitBytes = 1
	assert.NotEqual(t, int64(1), l.Pools()[0].UnitBytes, "edit of returned pools")
	assert.True(t, slices.Equal(l.Model().Windows, windowed().Windows))
	assert.Equal(t, PagedLayer, l.Kind())
	assert.Equal(t, 32, l.TokensPerUnit())
}

func TestNames(t *testing.T) {
	assert.Equal(t, "all-layers", AllLayers.String())
	assert.Equal(t, "paged-layer", PagedLayer.String())
	assert.Equal(t, "bsa", BSA.String())
	assert.Equal(t, "Kind(9)", Kind(9).String())
	assert.Equal(t, "K", Key.String())
	assert.Equal(t, "V", Value.String())
	assert.Equal(t, "latent", Latent.String())
	assert.Equal(t, "Component(7)", Component(7).String())
}
