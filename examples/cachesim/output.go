package main

import (
	"encoding/json"
	"fmt"
	"io"
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

// writeResult prints one result as a text line, libCacheSim style, or as
// a JSON object.
func writeResult(w io.Writer, o options, r result) error {
	var err error
	if o.asJSON {
		var b []byte
		b, err = json.Marshal(jsonResult{
			Trace: r.trace, Policy: r.policy, CacheSize: r.size,
			Requests: r.Requests, Misses: r.Misses, MissRatio: r.MissRatio(),
			ByteMisses: r.MissBytes, ByteMissRatio: r.ByteMissRatio(), Seconds: r.Seconds(),
		})
		if err == nil {
			_, err = fmt.Fprintf(w, "%s\n", b)
		}
	} else {
		_, err = fmt.Fprintf(w, "%s %s cache size %s, %d req, %d miss, miss ratio %.4f, byte miss ratio %.4f\n",
			r.trace, r.policy, formatSize(r.size, o.ignoreObjSize), r.Requests, r.Misses, r.MissRatio(), r.ByteMissRatio())
	}
	if err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	return nil
}
