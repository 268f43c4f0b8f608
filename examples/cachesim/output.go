package main

import (
	"fmt"
	"io"

	"github.com/kvtier/kvtier/internal/jsonlines"
)

// jsonResult is the -json line of one result.
type jsonResult struct {
	Trace         string  `json:"trace"`
	Policy        string  `json:"policy"`
	CacheSize     int64   `json:"cache_size"`
	Requests      int64   `json:"requests"`
	Misses        int64   `json:"misses"`
	MissRatio     float64 `json:"miss_ratio"`
	ByteMisses    int64   `json:"byte_misses"`
	ByteMissRatio float64 `json:"byte_miss_ratio"`
	Seconds       float64 `json:"seconds"`
}

// writeResults prints the results, one per line: libCacheSim-style text,
// or JSON objects with -json.
func writeResults(w io.Writer, o options, results []result) error {
	var err error
	if o.asJSON {
		rows := make([]jsonResult, len(results))
		for i, r := range results {
			rows[i] = jsonResult{
				Trace: r.trace, Policy: r.policy, CacheSize: r.size,
				Requests: r.Requests, Misses: r.Misses, MissRatio: r.MissRatio(),
				ByteMisses: r.MissBytes, ByteMissRatio: r.ByteMissRatio(), Seconds: r.Seconds(),
			}
		}
		err = jsonlines.Write(w, rows)
	} else {
		for _, r := range results {
			if _, err = fmt.Fprintf(w, "%s %s cache size %s, %d req, %d miss, miss ratio %.4f, byte miss ratio %.4f\n",
				r.trace, r.policy, formatSize(r.size, o.ignoreObjSize), r.Requests, r.Misses, r.MissRatio(), r.ByteMissRatio()); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	return nil
}
