package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/kvtier/kvtier/internal/flagparse"
)

// defaultTrace is the trace's place when the program runs from the
// repository's root (go run ./examples/prefixreplay).
const defaultTrace = "../shared/traces/mooncake_conversation.jsonl"

// options is the parsed command line.
type options struct {
	trace      string
	capacities []int64 // tokens; 0 stands for unlimited until resolved
	policies   []string
	limit      int
	seed       uint64
	alpha      float64
	beta       float64
	parallel   int
	json       bool
	svg        string

	// The fleet mode (-servers): see fleet.go.
	servers                         int
	redisAddr                       string
	gpuTokens, cpuTokens, redisToks int64 // 0 stands for unlimited until resolved
}

// fleetFlags are the flags only the fleet mode reads; singleFlags those it
// does not.
var (
	fleetFlags  = []string{"redis", "gpu-tokens", "cpu-tokens", "redis-tokens"}
	singleFlags = []string{"capacity-tokens", "policy", "svg", "retention-alpha", "retention-beta"}
)

// errUsage reports a bad flag value.
var errUsage = errors.New("bad usage") // main prefixes "prefixreplay: "

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("prefixreplay", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.trace, "trace", defaultTrace, "Mooncake-format trace (JSON lines with input_length and hash_ids)")
	caps := fs.String("capacity-tokens", "1M,3M,10M,50M", "GPU capacities in tokens, comma-separated; K, M, G suffixes are powers of 1000; \"unlimited\" holds the whole trace")
	pols := fs.String("policy", defaultPolicies, "eviction policies, comma-separated: "+strings.Join(policyNames, ", "))
	fs.IntVar(&o.limit, "limit", 0, "replay only the first N requests (0 = all)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthesized tokens and of the block hash (results do not depend on it)")
	fs.Float64Var(&o.alpha, "retention-alpha", 1e-6, "retention policy: recompute seconds per context token a block attends to")
	fs.Float64Var(&o.beta, "retention-beta", 0.03, "retention policy: fixed recompute seconds per 512-token block")
	fs.IntVar(&o.parallel, "parallel", 0, "settings simulated at once (0 = GOMAXPROCS)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per result row instead of a table")
	fs.StringVar(&o.svg, "svg", "", "write a plot of block hit ratio vs capacity to this file")
	fs.IntVar(&o.servers, "servers", 0, "fleet mode: replay through this many servers behind a round-robin router (request i to server i%N), without and with a shared Redis tier (0 = the single-cache report)")
	fs.StringVar(&o.redisAddr, "redis", os.Getenv("KVTIER_REDIS_ADDR"), "fleet mode: host:port of the Redis the servers share (default $KVTIER_REDIS_ADDR; empty skips the shared configuration)")
	gpu := fs.String("gpu-tokens", "1M", "fleet mode: GPU tier of each server, in tokens")
	cpu := fs.String("cpu-tokens", "2M", "fleet mode: CPU tier of each server, in tokens")
	redisToks := fs.String("redis-tokens", "unlimited", "fleet mode: Redis tier of each server, in tokens (\"unlimited\" holds every block of the replayed requests)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if o.limit < 0 {
		return o, fmt.Errorf("%w: -limit %d is negative", errUsage, o.limit)
	}
	if o.servers < 0 {
		return o, fmt.Errorf("%w: -servers %d is negative", errUsage, o.servers)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	if o.servers > 0 {
		for _, name := range singleFlags {
			if set[name] {
				return o, fmt.Errorf("%w: -%s does not apply with -servers (each server's tiers use LRU)", errUsage, name)
			}
		}
		for _, f := range []struct {
			name string
			s    string
			dst  *int64
		}{{"gpu-tokens", *gpu, &o.gpuTokens}, {"cpu-tokens", *cpu, &o.cpuTokens}, {"redis-tokens", *redisToks, &o.redisToks}} {
			if *f.dst, err = parseTokens(f.s); err != nil {
				return o, fmt.Errorf("-%s: %w", f.name, err)
			}
		}
		return o, nil
	}
	for _, name := range fleetFlags {
		if set[name] {
			return o, fmt.Errorf("%w: -%s needs -servers", errUsage, name)
		}
	}
	if o.capacities, err = parseCapacities(*caps); err != nil {
		return o, err
	}
	// A policy named twice is simulated once.
	if o.policies, err = flagparse.NameSet(*pols, policyNames); err != nil {
		return o, fmt.Errorf("%w: -policy: %w", errUsage, err)
	}
	return o, nil
}

// parseCapacities parses a comma list of token counts.
func parseCapacities(s string) ([]int64, error) {
	var out []int64
	for _, f := range flagparse.Split(s) {
		n, err := parseTokens(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: -capacity-tokens %q lists no capacity", errUsage, s)
	}
	return out, nil
}

// parseTokens parses a token count such as 3M, 1.5M, 500K or 1000000, or
// "unlimited" (returned as 0). Suffixes are decimal, as in "a 3M-token
// cache". A count must hold at least one 512-token block.
func parseTokens(s string) (int64, error) {
	if strings.EqualFold(s, "unlimited") {
		return 0, nil
	}
	mult := 1.0
	num := s
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			mult = 1e3
		case 'm', 'M':
			mult = 1e6
		case 'g', 'G':
			mult = 1e9
		}
		if mult != 1 {
			num = s[:len(s)-1]
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: capacity %q is not a token count", errUsage, s)
	}
	v *= mult
	if v < traceBlockTokens || v > 1<<50 {
		return 0, fmt.Errorf("%w: capacity %q must be between %d and 2^50 tokens", errUsage, s, traceBlockTokens)
	}
	return int64(v), nil
}

// formatTokens prints a token count the way -capacity-tokens takes it.
func formatTokens(n int64) string {
	switch {
	case n >= 1e9 && n%1e9 == 0:
		return fmt.Sprintf("%dG", n/1e9)
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dK", n/1e3)
	}
	return strconv.FormatInt(n, 10)
}
