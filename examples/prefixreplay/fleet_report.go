package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// writeText prints the fleet report: the setup, one row per server and
// configuration with their totals, the comparison and the wall time.
func (rep fleetReport) writeText(w io.Writer) error {
	b := rep.bound
	fmt.Fprintf(w, "trace %s: %d requests", rep.trace, rep.requests)
	if rep.requests < rep.total {
		fmt.Fprintf(w, " (the first of %d: -limit)", rep.total)
	}
	fmt.Fprintf(w, ", %d blocks of %d tokens, %d input tokens\n", b.blocks, traceBlockTokens, b.tokens)
	fmt.Fprintf(w, "unlimited single cache (direct count over the ids): %.2f%% of tokens reused\n", 100*ratio(b.tokenHits, b.tokens))
	fmt.Fprintf(w, "%d servers, request i on server i%%%d; each: GPU %s (%d blocks), CPU %s (%d blocks), LRU, %d-byte blocks\n",
		rep.servers, rep.servers, tokensLabel(rep.gpuTokens), rep.gpu, tokensLabel(rep.cpuTokens), rep.cpu, rep.unitBytes)
	if rep.redis > 0 {
		fmt.Fprintf(w, "shared-redis: plus a Redis tier of %s (%d blocks) per server, write-through, Lookup before Acquire; Redis %s, keys %s:*\n",
			tokensLabel(rep.redisTokens), rep.redis, rep.redisAddr, rep.prefix)
		fmt.Fprintln(w, "private-redis: the same, but each server's keys under a prefix of its own: the capacity without the sharing")
	} else {
		fmt.Fprintln(w, "shared-redis: skipped (no Redis: set -redis or KVTIER_REDIS_ADDR)")
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\tserver\trequests\tprompt tokens\treused tokens\ttoken hit\tprefix hit\tcomputed\trecomputed\tCPU loads\tRedis loads\tadopted\tfailed\tmissing\tcorrupt\tmismatches\t")
	for _, r := range rep.rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.2f%%\t%.2f%%\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
			r.Config, r.Server, r.Requests, r.PromptTokens, r.ReusedTokens, 100*r.TokenHitRatio, 100*r.PrefixHitRatio,
			r.ComputedTokens, r.RecomputedTokens, r.CPULoads, r.RedisLoads, r.AdoptedUnits,
			r.FailedLoads, r.MissingLoads, r.CorruptLoads, r.ByteMismatches)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.rows {
		if r.Server != "total" {
			continue
		}
		if r.TooLarge > 0 {
			fmt.Fprintf(w, "note: %s: %d requests larger than the GPU counted as all miss\n", r.Config, r.TooLarge)
		}
		if r.LookupErrors > 0 || r.StoreErrors > 0 {
			fmt.Fprintf(w, "note: %s: %d failed lookups, %d failed store calls\n", r.Config, r.LookupErrors, r.StoreErrors)
		}
	}
	fmt.Fprintln(w)
	if private, ok := rep.totalOf(configPrivate); ok {
		if shared, ok := rep.totalOf(configShared); ok {
			local, _ := rep.totalOf(configLocal)
			fmt.Fprintf(w, "private-redis reuses %.2f%% of prompt tokens: of shared-redis's gain over local, %.1f%% is the Redis tier's capacity, %.1f%% the sharing\n",
				100*private.TokenHitRatio, 100*ratio(private.ReusedTokens-local.ReusedTokens, shared.ReusedTokens-local.ReusedTokens),
				100*ratio(shared.ReusedTokens-private.ReusedTokens, shared.ReusedTokens-local.ReusedTokens))
		}
	}
	local, shared, ok := rep.totals()
	if ok {
		fmt.Fprintf(w, "shared-redis reuses %d more tokens than local (%+.1f%%): %.2f%% of prompt tokens vs %.2f%% (unlimited single cache: %.2f%%)\n",
			shared.ReusedTokens-local.ReusedTokens, 100*(ratio(shared.ReusedTokens, local.ReusedTokens)-1),
			100*shared.TokenHitRatio, 100*local.TokenHitRatio, 100*ratio(b.tokenHits, b.tokens))
		fmt.Fprintf(w, "of the %d blocks loaded from Redis, %d were adopted (first computed by the other server), %d had been on the loading server before (evicted from its GPU and CPU)\n",
			shared.RedisLoads, shared.AdoptedUnits, shared.RedisLoads-min(shared.RedisLoads, shared.AdoptedUnits))
		fmt.Fprintf(w, "redis: %d keys of the run deleted afterwards (SCAN %s:* and the private prefixes + DEL)\n", rep.keysDeleted, rep.prefix)
	}
	var times []string
	for _, r := range rep.rows {
		if r.Server == "total" {
			times = append(times, fmt.Sprintf("%s %.1fs", r.Config, r.elapsed.Seconds()))
		}
	}
	_, err := fmt.Fprintf(w, "time: %.1fs (%s), %d at a time\n", rep.elapsed.Seconds(), strings.Join(times, ", "), rep.parallel)
	return err
}

// totalOf returns the total row of configuration config, if it ran.
func (rep fleetReport) totalOf(config string) (fleetRow, bool) {
	for _, r := range rep.rows {
		if r.Server == "total" && r.Config == config {
			return r, true
		}
	}
	return fleetRow{}, false
}

// totals returns the total rows of both configurations, if both ran.
func (rep fleetReport) totals() (local, shared fleetRow, ok bool) {
	var haveLocal, haveShared bool
	for _, r := range rep.rows {
		switch {
		case r.Server != "total":
		case r.Config == configLocal:
			local, haveLocal = r, true
		case r.Config == configShared:
			shared, haveShared = r, true
		}
	}
	return local, shared, haveLocal && haveShared
}

// tokensLabel prints a capacity flag's value: a token count, or
// "unlimited" (room for every block of the replayed requests).
func tokensLabel(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return formatTokens(n) + " tokens"
}
