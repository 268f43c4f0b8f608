package layout_test

import (
	"fmt"

	"github.com/kvtier/kvtier/layout"
)

func ExampleNew() {
	l, err := layout.New(layout.SeedModel(), layout.PagedLayer, 32)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := l.Slice(0)
	fmt.Println(l.UnitsPerBlock(), "pages per token block of", l.TokensPerUnit(), "tokens")
	fmt.Println(s.UnitBytes>>20, "MiB per page")

	_, err = layout.New(layout.SeedModel(), layout.PagedLayer, 24)
	fmt.Println(err)
	// Output:
	// 28 pages per token block of 32 tokens
	// 1 MiB per page
	// layout: invalid layout: block tokens 24 must be a power of two and at least 2
}

func ExampleLayout_Locate() {
	l, _ := layout.New(layout.SeedModel(), layout.BSA, 512)
	// V of KV head 3, layer 2, token 10 of the block, dim 5.
	slice, offset, _ := l.Locate(layout.Element{KVLayer: 2, KVHead: 3, Component: layout.Value, Token: 10, Dim: 5})
	st := l.Strides()
	fmt.Println("slice", slice, "offset", offset)
	fmt.Println("= V", st.Component, "+ token", 10*st.Token, "+ dim", 5*st.Dim)
	// Output:
	// slice 19 offset 43018
	// = V 2048 + token 40960 + dim 10
}

func ExampleLayout_Footprint() {
	l, _ := layout.New(layout.Llama2_13B(), layout.PagedLayer, 16)
	u, _ := l.Footprint(4096)
	fmt.Println(u.Units, "pages,", u.Bytes, "bytes")
	// Output:
	// 10240 pages, 3355443200 bytes
}

func ExampleLayout_Touched() {
	// Two query heads share one KV head (GQA); MoBA blocks of 4 tokens over
	// 2-token pages.
	m := layout.Model{Layers: 1, QueryHeads: 2, KVHeads: 1, HeadDim: 64, ElemBytes: 2}
	l, _ := layout.New(m, layout.PagedLayer, 2)
	sel := layout.Selection{
		Tokens:      12,
		BlockTokens: 4,
		Blocks:      [][][]int64{{{2, 0}, {2, 1}}}, // both heads pick the current block 2
	}
	refs, _ := l.AppendTouched(nil, sel)
	u, _ := l.Touched(sel)
	fmt.Println(refs)
	fmt.Println(u.Units, "pages,", u.Bytes, "bytes")
	// Output:
	// [{0 0} {0 1} {0 2} {0 3} {0 4} {0 5}]
	// 6 pages, 3072 bytes
}

func ExampleLayout_Pools() {
	// Gemma-style: full attention every third layer, a 1024-token window
	// elsewhere.
	m := layout.Model{Name: "mixed", Layers: 6, QueryHeads: 8, KVHeads: 4, HeadDim: 128, ElemBytes: 2,
		Windows: []int{1024, 1024, 0, 1024, 1024, 0}}
	for _, kind := range []layout.Kind{layout.AllLayers, layout.PagedLayer} {
		l, _ := layout.New(m, kind, 64)
		for _, p := range l.Pools() {
			fmt.Printf("%s pool %d: window %d, %d unit(s) of %d KiB per token block\n",
				kind, p.Index, p.Window, p.UnitsPerBlock, p.UnitBytes>>10)
		}
	}
	// Output:
	// all-layers pool 0: window 1024, 1 unit(s) of 512 KiB per token block
	// all-layers pool 1: window 0, 1 unit(s) of 256 KiB per token block
	// paged-layer pool 0: window 1024, 4 unit(s) of 128 KiB per token block
	// paged-layer pool 1: window 0, 2 unit(s) of 128 KiB per token block
}
