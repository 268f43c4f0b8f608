package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
)

// defaultTrace is libCacheSim's cloudPhysicsIO trace when the program runs
// from the repository's root.
const defaultTrace = "../shared/traces/cloudPhysicsIO.oracleGeneral.bin"

// source is a trace ready to replay many times.
type source struct {
	name     string
	prepared *replay.Prepared
	requests int
	objects  int
	// workingSet is the sum of the distinct objects' sizes (first size
	// seen), in the cache's unit: bytes, or objects when objectMode.
	workingSet int64
	objectMode bool
}

// loadSource reads the trace the options name, or generates the Zipf one.
// The default trace falls back to Zipf when it is absent (a fresh clone
// has no ../shared), with a note on stderr; a trace named with -trace must
// exist.
func loadSource(o options, stderr io.Writer) (source, error) {
	if o.zipf || (!o.traceSet && !exists(o.trace)) {
		if !o.zipf {
			fmt.Fprintf(stderr, "custompolicy: no trace at %s (libCacheSim's cloudPhysicsIO trace; TRACES.md at the repository's root says how to get it): replaying a generated Zipf trace instead\n", o.trace)
		}
		reqs, err := zipfTrace(o.seed, o.zipfRequests, o.zipfObjects, o.zipfAlpha)
		if err != nil {
			return source{}, err
		}
		name := fmt.Sprintf("zipf(alpha=%g, %d objects, seed %d)", o.zipfAlpha, o.zipfObjects, o.seed)
		return newSource(name, reqs, true), nil
	}
	format, err := formatOf(o.trace, o.format)
	if err != nil {
		return source{}, err
	}
	f, err := trace.OpenFile(o.trace, format, trace.Options{})
	if err != nil {
		return source{}, err
	}
	defer f.Close()
	reqs, err := trace.Load(f)
	if err != nil {
		return source{}, err
	}
	if len(reqs) == 0 {
		return source{}, fmt.Errorf("%w: trace %s has no requests", errUsage, o.trace)
	}
	return newSource(o.trace, reqs, o.ignoreObjSize || format == trace.Text), nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// formatOf returns the format named by -format, or guessed from the file's
// extension: .bin is oracleGeneral, .txt one id per line.
func formatOf(path, name string) (trace.Format, error) {
	if name != "" {
		return trace.ParseFormat(name)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".bin":
		return trace.OracleGeneral, nil
	case ".txt":
		return trace.Text, nil
	}
	return 0, fmt.Errorf("%w: cannot tell the format of %s from its extension: give -format", errUsage, path)
}

// newSource prepares reqs and measures their working set.
func newSource(name string, reqs []trace.Request, objectMode bool) source {
	seen := make(map[uint64]struct{})
	var ws int64
	for _, r := range reqs {
		if r.Size == 0 { // the replay skips them too
			continue
		}
		if _, ok := seen[r.ID]; !ok {
			seen[r.ID] = struct{}{}
			if objectMode {
				ws++
			} else {
				ws += r.Size
			}
		}
	}
	p := replay.Prepare(reqs)
	return source{name: name, prepared: p, requests: p.Len(), objects: p.Objects(), workingSet: ws, objectMode: objectMode}
}

// errZipf reports bad Zipf parameters.
var errZipf = errors.New("bad zipf parameters")

// zipfTrace draws n requests over m objects of size 1 with popularity
// proportional to 1/rank^alpha (independent reference model). Ranks are
// shuffled into ids so that no policy can profit from id order.
func zipfTrace(seed uint64, n, m int, alpha float64) ([]trace.Request, error) {
	if n < 1 || m < 1 || !(alpha > 0) || math.IsInf(alpha, 0) {
		return nil, fmt.Errorf("%w: %d requests, %d objects, alpha %g", errZipf, n, m, alpha)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cdf := make([]float64, m)
	sum := 0.0
	for i := range cdf {
		sum += math.Pow(float64(i+1), -alpha)
		cdf[i] = sum
	}
	ids := rng.Perm(m)
	reqs := make([]trace.Request, n)
	for i := range reqs {
		rank, _ := slices.BinarySearch(cdf, rng.Float64()*sum)
		rank = min(rank, m-1)
		reqs[i] = trace.Request{Time: int64(i), ID: uint64(ids[rank]), Size: 1, NextAccess: -1}
	}
	return reqs, nil
}
