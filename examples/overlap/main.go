// Command overlap simulates a server that onboards cached KV from the CPU
// while it computes, and compares two ways of using kvcache's
// asynchronous transfers: layer-wise (layer l's attention runs once
// Readiness says layer l is ready, while layer l+1 still loads) and
// whole-request (the prefill starts once every load is done), and
// layer-wise with write-through to the CPU. It reports
// the time to first token of each and the fraction of copy time hidden
// behind compute. Time is simulated (a cost per copied unit and per
// computed token), the cache and its transfers are real.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// config is the simulation's parameters (flags).
type config struct {
	sessions, turns     int
	message, answer     int
	gpuUnits, cpuUnits  int64
	copyUs, tokenUs     float64
	layerUs             float64
	layers, blockTokens int
	seed                uint64
}

func defaults() config {
	return config{sessions: 8, turns: 6, message: 256, answer: 128, gpuUnits: 8192, cpuUnits: 65536,
		copyUs: 2.6, tokenUs: 1.25, layerUs: 20, layers: 32, blockTokens: 16, seed: 1}
}

// result is what one mode measured.
type result struct {
	Mode string `json:"mode"`
	// Turns served; TTFT statistics in milliseconds.
	Turns    int     `json:"turns"`
	MeanTTFT float64 `json:"mean_ttft_ms"`
	P50TTFT  float64 `json:"p50_ttft_ms"`
	P99TTFT  float64 `json:"p99_ttft_ms"`
	// CopyMs is the copy time of the transfers the turns waited on;
	// StallMs the part of it during which the prefill waited; Hidden =
	// 1 - StallMs/CopyMs.
	CopyMs  float64 `json:"copy_ms"`
	StallMs float64 `json:"stall_ms"`
	Hidden  float64 `json:"hidden"`
	// Onboarded units, in all turns.
	Onboarded int `json:"onboarded"`
}

func main() {
	cfg := defaults()
	flag.IntVar(&cfg.sessions, "sessions", cfg.sessions, "chat sessions, served round-robin (each turn finds its history pushed to the CPU by the others)")
	flag.IntVar(&cfg.turns, "turns", cfg.turns, "turns per session")
	flag.IntVar(&cfg.message, "message", cfg.message, "tokens of a user message (computed at each turn)")
	flag.IntVar(&cfg.answer, "answer", cfg.answer, "tokens of an answer (joins the history)")
	flag.Int64Var(&cfg.gpuUnits, "gpu-units", cfg.gpuUnits, "GPU capacity in units (one block of one layer)")
	flag.Int64Var(&cfg.cpuUnits, "cpu-units", cfg.cpuUnits, "CPU capacity in units")
	flag.Float64Var(&cfg.copyUs, "copy-us", cfg.copyUs, "copy time of one unit, µs (64 KiB over a 25 GB/s link)")
	flag.Float64Var(&cfg.tokenUs, "token-us", cfg.tokenUs, "compute time of one token in one layer, µs")
	flag.Float64Var(&cfg.layerUs, "layer-us", cfg.layerUs, "fixed compute time of one layer, µs")
	flag.IntVar(&cfg.layers, "layers", cfg.layers, "model layers")
	flag.Uint64Var(&cfg.seed, "seed", cfg.seed, "workload seed")
	asJSON := flag.Bool("json", false, "one JSON object per mode instead of a table")
	flag.Parse()
	if err := run(os.Stdout, cfg, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "overlap:", err)
		os.Exit(1)
	}
}

// run simulates both modes on the same workload and prints the results.
func run(w io.Writer, cfg config, asJSON bool) error {
	var results []result
	for _, mode := range []struct{ layerWise, writeThrough bool }{{true, false}, {false, false}, {true, true}} {
		r, err := simulate(cfg, mode.layerWise, mode.writeThrough)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tturns\tmean TTFT ms\tp50 ms\tp99 ms\tcopy ms\tstall ms\thidden\tonboarded units\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f%%\t%d\t\n",
			r.Mode, r.Turns, r.MeanTTFT, r.P50TTFT, r.P99TTFT, r.CopyMs, r.StallMs, 100*r.Hidden, r.Onboarded)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	a, b := results[0], results[1]
	_, err := fmt.Fprintf(w, "layer-wise onboarding: mean TTFT %.2fx of whole-request\n", a.MeanTTFT/b.MeanTTFT)
	return err
}

// simulate serves the workload once, with a fresh cache (and
// write-through to the CPU when writeThrough).
func simulate(cfg config, layerWise, writeThrough bool) (result, error) {
	m := layout.Model{Name: "8b-like", Layers: cfg.layers, QueryHeads: 32, KVHeads: 8, HeadDim: 128, ElemBytes: 2}
	l, err := layout.New(m, layout.PagedLayer, cfg.blockTokens)
	if err != nil {
		return result{}, err
	}
	eng := &stream{perUnit: cfg.copyUs}
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: cfg.gpuUnits}, kvcache.Capacity{Units: cfg.cpuUnits})
	tiers[1].WriteThrough = writeThrough
	c, err := kvcache.New(kvcache.Config{Layout: l, Engine: eng, Tiers: tiers})
	if err != nil {
		return result{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 7))
	words := func(n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(rng.IntN(32000))
		}
		return out
	}
	histories := make([][]uint32, cfg.sessions)
	res := result{Mode: map[bool]string{true: "layer-wise", false: "whole-request"}[layerWise]}
	if writeThrough {
		res.Mode += "+write-through"
	}
	var ttfts []float64
	var rd kvcache.Readiness
	for range cfg.turns {
		for s := range histories {
			prompt := slices.Concat(histories[s], words(cfg.message))
			arrival := eng.now
			busy := eng.busy
			plan, err := c.Acquire(kvcache.Request{Tokens: prompt})
			if err != nil {
				return result{}, err
			}
			res.Onboarded += plan.Onboarded
			computed := 0
			for _, r := range plan.Compute {
				computed += r.End - r.Start
			}
			layerTime := cfg.layerUs + cfg.tokenUs*float64(computed)
			stall := 0.0
			for layer := range cfg.layers {
				// Wait for this layer (layer-wise) or for every layer.
				for {
					eng.reportDue()
					if err := c.Readiness(plan.Seq, &rd); err != nil {
						return result{}, err
					}
					if len(rd.Recompute) > 0 {
						return result{}, fmt.Errorf("a load failed: %v", rd.Recompute)
					}
					if (layerWise && rd.Layers[layer]) || rd.Pending == 0 {
						break
					}
					before := eng.now
					if eng.next() {
						stall += eng.now - before
						continue
					}
					// Every transfer has ended, but one Readiness call
					// applies at most a step's worth of finished moves;
					// Completed signals while some are left.
					select {
					case <-c.Completed():
					default:
						return result{}, fmt.Errorf("layer %d waits on transfers that never run", layer)
					}
				}
				eng.now += layerTime
			}
			ttfts = append(ttfts, eng.now-arrival)
			res.CopyMs += (eng.busy - busy) / 1e3
			res.StallMs += stall / 1e3
			// Decode (not timed): the answer joins the history.
			answer := words(cfg.answer)
			if _, err := c.Append(plan.Seq, answer...); err != nil {
				return result{}, err
			}
			if err := c.Commit(plan.Seq, len(prompt)+len(answer)); err != nil {
				return result{}, err
			}
			if err := c.Release(plan.Seq); err != nil {
				return result{}, err
			}
			histories[s] = slices.Concat(prompt, answer)
		}
	}
	for eng.next() { // the last offloads
	}
	slices.Sort(ttfts)
	sum := 0.0
	for _, t := range ttfts {
		sum += t
	}
	res.Turns = len(ttfts)
	res.MeanTTFT = sum / float64(len(ttfts)) / 1e3
	res.P50TTFT = ttfts[len(ttfts)/2] / 1e3
	res.P99TTFT = ttfts[min(len(ttfts)-1, len(ttfts)*99/100)] / 1e3
	if res.CopyMs > 0 {
		res.Hidden = max(0, 1-res.StallMs/res.CopyMs)
	}
	return res, nil
}
