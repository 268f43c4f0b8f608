package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// writeText prints rep as a table.
func writeText(w io.Writer, rep report) error {
	m := rep.Model
	var b strings.Builder
	fmt.Fprintf(&b, "model %s: %d layers (%d KV layers), %d query / %d KV heads, head dim %d, %d-byte elements",
		m.Name, m.Layers, m.KVLayers, m.QueryHeads, m.KVHeads, m.HeadDim, m.ElemBytes)
	if m.MLALatentDims > 0 {
		fmt.Fprintf(&b, ", MLA %d+%d dims", m.MLALatentDims, m.MLARopeDims)
	}
	if m.Window > 0 {
		fmt.Fprintf(&b, ", window %d", m.Window)
	}
	fmt.Fprintf(&b, "\nKV per token: %s; context %d tokens\n\n", bytesText(rep.BytesPerToken), rep.ContextTokens)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "unit kind\ttokens/unit\tunits/block\tunit bytes\twindow\tcontext bytes")
	for _, k := range rep.Kinds {
		for i, p := range k.Pools {
			ctx := ""
			if i == 0 {
				ctx = bytesText(k.ContextBytes)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", k.Kind, k.TokensPerUnit, p.UnitsPerBlock, bytesText(p.UnitBytes), windowText(p.Window), ctx)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	wc := rep.WorstCase
	fmt.Fprintf(&b, "\nworst case per decode step: context %d, selection block %d tokens, top-%d with the current block\n",
		rep.ContextTokens, wc.SelectionBlockTokens, wc.TopK)
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, s := range []stepTraffic{wc.Paged, wc.BSA} {
		fmt.Fprintf(tw, "%s (%d-token units)\t%d units\t%s\n", s.Kind, s.TokensPerUnit, s.Units, bytesText(s.Bytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "paged / bsa = %s\n", strconv.FormatFloat(round3(wc.PagedOverBSA), 'f', -1, 64))
	_, err := io.WriteString(w, b.String())
	return err
}

// writeJSON prints rep as indented JSON.
func writeJSON(w io.Writer, rep report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// bytesText gives the exact byte count and, when it is at least a KiB, the
// binary-unit sizes that read best: "1048576 B (1 MiB)", "3758096384 B
// (3.5 GiB, 3584 MiB)".
func bytesText(n int64) string {
	const kib, mib, gib = 1 << 10, 1 << 20, 1 << 30
	var units []string
	if n >= gib {
		units = append(units, scaled(n, gib, "GiB"))
	}
	if n >= mib {
		units = append(units, scaled(n, mib, "MiB"))
	} else if n >= kib {
		units = append(units, scaled(n, kib, "KiB"))
	}
	if len(units) == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d B (%s)", n, strings.Join(units, ", "))
}

func scaled(n, unit int64, name string) string {
	return strconv.FormatFloat(round3(float64(n)/float64(unit)), 'f', -1, 64) + " " + name
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func windowText(w int) string {
	if w == 0 {
		return "full"
	}
	return strconv.Itoa(w)
}
