package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/kvtier/kvtier/internal/flagparse"
)

// errBadFlag reports a flag value the simulation cannot use.
var errBadFlag = errors.New("bad flag") // main prefixes "multiturn: "

// config is everything a run depends on: the workload, the cache, the cost
// model and the output. Every field has a flag.
type config struct {
	Seed uint64

	// Workload.
	Sessions   int           // number of sessions
	Rate       float64       // session arrivals per second (Poisson)
	TurnsMean  float64       // mean turns per session (geometric, at least 1)
	MaxTurns   int           // cap on turns per session
	SysPrompts int           // distinct system prompts shared by sessions
	SysLen     int           // tokens of each system prompt
	UserMean   float64       // mean user message tokens (log-normal)
	AnswerMean float64       // mean answer tokens (log-normal)
	ThinkMean  time.Duration // mean think time between turns (exponential)
	TPOT       time.Duration // decode time per answer token
	MaxContext int           // a session ends before its context would exceed this

	// Cache.
	Model       string
	BlockTokens int
	GPUGiB      float64
	CPUGiB      float64
	Sweep       []float64 // GPU sizes (GiB) to sweep; nil: no sweep

	// Cost model (zero Alpha/Beta: derived from the model, see costs.go).
	Alpha         float64 // seconds per context token per block
	Beta          float64 // seconds per block
	FLOPS         float64 // effective FLOP/s behind the derived Alpha/Beta
	LinkGBps      float64 // CPU<->GPU bandwidth, GB/s (1e9 bytes/s)
	DecideWeights string  // weights the offload-or-drop decision uses: flat or seed

	Policies []string

	JSON bool
	SVG  string
}

// defaultConfig returns the configuration of a run with no flags.
func defaultConfig() config {
	return config{
		Seed:          1,
		Sessions:      200,
		Rate:          0.25,
		TurnsMean:     5,
		MaxTurns:      20,
		SysPrompts:    4,
		SysLen:        600,
		UserMean:      100,
		AnswerMean:    250,
		ThinkMean:     60 * time.Second,
		TPOT:          25 * time.Millisecond,
		MaxContext:    8192,
		Model:         "llama2-13b",
		BlockTokens:   32,
		GPUGiB:        24,
		CPUGiB:        48,
		FLOPS:         156e12,
		LinkGBps:      25,
		DecideWeights: "flat",
		Policies:      policyNames(),
	}
}

// parseFlags parses args into a config, writing usage and errors to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("multiturn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the workload generator")
	fs.IntVar(&c.Sessions, "sessions", c.Sessions, "number of chat sessions")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "session arrivals per second (Poisson process)")
	fs.Float64Var(&c.TurnsMean, "turns", c.TurnsMean, "mean turns per session (geometric, at least 1)")
	fs.IntVar(&c.MaxTurns, "max-turns", c.MaxTurns, "cap on turns per session")
	fs.IntVar(&c.SysPrompts, "sys-prompts", c.SysPrompts, "distinct system prompts; each session uses one at random (0: none)")
	fs.IntVar(&c.SysLen, "sys-len", c.SysLen, "tokens of each system prompt")
	fs.Float64Var(&c.UserMean, "user-mean", c.UserMean, "mean tokens of a user message (log-normal, sigma 1)")
	fs.Float64Var(&c.AnswerMean, "answer-mean", c.AnswerMean, "mean tokens of an answer (log-normal, sigma 0.8)")
	fs.DurationVar(&c.ThinkMean, "think", c.ThinkMean, "mean think time between a turn's answer and the next user message (exponential)")
	fs.DurationVar(&c.TPOT, "tpot", c.TPOT, "decode time per answer token (how long a turn keeps its KV pinned)")
	fs.IntVar(&c.MaxContext, "max-context", c.MaxContext, "a session ends before its context would exceed this many tokens")
	fs.StringVar(&c.Model, "model", c.Model, "model: "+strings.Join(modelNames(), ", "))
	fs.IntVar(&c.BlockTokens, "block", c.BlockTokens, "tokens per block (power of two, at least 2)")
	fs.Float64Var(&c.GPUGiB, "gpu-gib", c.GPUGiB, "GPU KV-cache capacity, GiB")
	fs.Float64Var(&c.CPUGiB, "cpu-gib", c.CPUGiB, "CPU offload capacity, GiB (0: no CPU tier)")
	sweep := fs.String("sweep", "", "comma-separated GPU sizes in GiB to run instead of -gpu-gib (e.g. 8,16,32,64)")
	fs.Float64Var(&c.Alpha, "alpha", 0, "recompute seconds per context token per block (0: derived from the model and -flops)")
	fs.Float64Var(&c.Beta, "beta", 0, "recompute seconds per block (0: derived from the model and -flops)")
	fs.Float64Var(&c.FLOPS, "flops", c.FLOPS, "effective prefill FLOP/s behind the derived alpha and beta")
	fs.Float64Var(&c.LinkGBps, "link-gbps", c.LinkGBps, "CPU<->GPU copy bandwidth, GB/s")
	fs.StringVar(&c.DecideWeights, "decide-weights", c.DecideWeights, "weights of the cache's offload-or-drop decision: flat or seed")
	pols := fs.String("policies", strings.Join(c.Policies, ","), "comma-separated policies: "+strings.Join(policyNames(), ", "))
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object per result row instead of the table")
	fs.StringVar(&c.SVG, "svg", "", "write a plot to this file (TTFT CDF; with -sweep, mean TTFT against GPU size)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected argument %q", errBadFlag, fs.Arg(0))
	}
	// Unknown and repeated names are validate's to report.
	c.Policies = flagparse.Split(*pols)
	if *sweep != "" {
		var err error
		if c.Sweep, err = flagparse.Floats(*sweep); err != nil {
			return c, fmt.Errorf("%w: -sweep: %w", errBadFlag, err)
		}
	}
	return c, c.validate()
}

// validate reports the first field a simulation cannot use.
func (c config) validate() error {
	pos := func(name string, v float64) error {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: -%s %v must be positive and finite", errBadFlag, name, v)
		}
		return nil
	}
	nonNeg := func(name string, v float64) error {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: -%s %v must be non-negative and finite", errBadFlag, name, v)
		}
		return nil
	}
	checks := []error{
		pos("sessions", float64(c.Sessions)),
		pos("rate", c.Rate),
		pos("max-turns", float64(c.MaxTurns)),
		nonNeg("sys-prompts", float64(c.SysPrompts)),
		nonNeg("sys-len", float64(c.SysLen)),
		pos("user-mean", c.UserMean),
		pos("answer-mean", c.AnswerMean),
		nonNeg("think", c.ThinkMean.Seconds()),
		nonNeg("tpot", c.TPOT.Seconds()),
		pos("max-context", float64(c.MaxContext)),
		pos("gpu-gib", c.GPUGiB),
		nonNeg("cpu-gib", c.CPUGiB),
		nonNeg("alpha", c.Alpha),
		nonNeg("beta", c.Beta),
		pos("flops", c.FLOPS),
		pos("link-gbps", c.LinkGBps),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if c.TurnsMean < 1 || math.IsInf(c.TurnsMean, 0) || math.IsNaN(c.TurnsMean) {
		return fmt.Errorf("%w: -turns %v must be at least 1", errBadFlag, c.TurnsMean)
	}
	if c.SysPrompts > 0 && c.SysLen == 0 {
		return fmt.Errorf("%w: -sys-len 0 with -sys-prompts %d", errBadFlag, c.SysPrompts)
	}
	if c.SysLen+2 > c.MaxContext {
		// A first turn needs at least one user and one answer token.
		return fmt.Errorf("%w: -sys-len %d leaves no room for a turn under -max-context %d", errBadFlag, c.SysLen, c.MaxContext)
	}
	if _, ok := models()[c.Model]; !ok {
		return fmt.Errorf("%w: -model %q is not one of %s", errBadFlag, c.Model, strings.Join(modelNames(), ", "))
	}
	if _, err := newLayout(c); err != nil {
		return fmt.Errorf("%w: -model %s with -block %d: %w", errBadFlag, c.Model, c.BlockTokens, err)
	}
	if c.DecideWeights != "flat" && c.DecideWeights != "seed" {
		return fmt.Errorf("%w: -decide-weights %q is not flat or seed", errBadFlag, c.DecideWeights)
	}
	if len(c.Policies) == 0 {
		return fmt.Errorf("%w: -policies is empty", errBadFlag)
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
		if _, ok := policyByName(p); !ok {
			return fmt.Errorf("%w: -policies: unknown policy %q (known: %s)", errBadFlag, p, strings.Join(policyNames(), ", "))
		}
		if seen[p] {
			return fmt.Errorf("%w: -policies: %q listed twice", errBadFlag, p)
		}
		seen[p] = true
	}
	for _, g := range c.Sweep {
		if err := pos("sweep", g); err != nil {
			return err
		}
	}
	return nil
}
