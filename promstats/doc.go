// Package promstats exports the statistics of a kvcache.Cache (Cache.Stats)
// as Prometheus metrics, through a prometheus.Collector built by
// NewCollector.
//
// The Collector keeps no counters of its own: every scrape takes one
// snapshot with Cache.Stats, which holds the cache's lock for a time
// proportional to the number of tiers and pools, and reports it as constant
// metrics. Counters count from the cache's creation. Register one Collector
// per cache, telling the caches apart with Options.ConstLabels:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(promstats.NewCollector(c, promstats.Options{
//		ConstLabels: prometheus.Labels{"model": "llama-3-8b"},
//	}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Metrics
//
// The names below use the default namespace, kvtier (Options.Namespace
// replaces it). A unit is the cache's unit of KV (see package layout): a
// token block's KV, or one layer or head of it. Slots hold one unit each.
//
// Per tier, with the label tier set to the tier's name (TierConfig.Name,
// "GPU" and "CPU" by default), from kvcache.TierStats:
//
//	kvtier_tier_hits_total             counter  unit lookups that found the unit on the tier (Hits)
//	kvtier_tier_misses_total           counter  unit lookups that reached the tier and missed (Misses)
//	kvtier_tier_evictions_total        counter  victims the tier's policies chose (Evictions)
//	kvtier_tier_drops_total            counter  victims dropped rather than moved down (Drops)
//	kvtier_tier_moved_in_total         counter  units received from the tier above (MovedIn)
//	kvtier_tier_moved_in_bytes_total   counter  their bytes (MovedInBytes)
//	kvtier_tier_failed_total           counter  units whose transfer into the tier failed (Failed)
//	kvtier_tier_lost_total             counter  units dropped by a Mover's panic (Lost)
//	kvtier_tier_missing_total          counter  units of failed loads the store reported missing (Missing)
//	kvtier_tier_corrupt_total          counter  units of failed loads the store reported corrupt (Corrupt)
//	kvtier_tier_adopted_total          counter  units Cache.Adopt registered on the tier (Adopted)
//	kvtier_tier_backups_written_total  counter  backups the write-through tier received (BackupsWritten)
//	kvtier_tier_backups                gauge    slots holding backups, on the write-through tier (Backups)
//	kvtier_tier_capacity_slots         gauge    unit slots: free + pinned + cached (Capacity)
//	kvtier_tier_free_slots             gauge    slots holding no unit (Free)
//	kvtier_tier_pinned_slots           gauge    slots holding a pinned unit (Pinned)
//	kvtier_tier_cached_slots           gauge    slots holding an evictable cached unit (Cached)
//	kvtier_tier_capacity_bytes         gauge    bytes of the slots (CapacityBytes)
//	kvtier_tier_free_bytes             gauge    bytes of the free slots (FreeBytes)
//	kvtier_tier_pinned_bytes           gauge    bytes of the pinned slots (PinnedBytes)
//	kvtier_tier_cached_bytes           gauge    bytes of the cached slots (CachedBytes)
//
// Per share of a tier (kvcache.TierConfig.Shares), with the labels tier and
// namespace, from kvcache.ShareStats:
//
//	kvtier_share_used_slots            gauge    slots holding the namespace's units (Used)
//	kvtier_share_reserved_slots        gauge    slots its share reserves (Reserved)
//	kvtier_share_cap_slots             gauge    the most slots its units may hold (Cap)
//	kvtier_share_evictions_total       counter  its units the tier evicted (Evictions)
//	kvtier_share_drops_at_cap_total    counter  its units dropped at its cap instead of entering (DropsAtCap)
//
// Cache-wide, from kvcache.Stats:
//
//	kvtier_offloads_total              counter  units moved down a tier (Offloads)
//	kvtier_onboards_total              counter  units copied to the GPU from a lower tier (Onboards)
//	kvtier_copies_total                counter  copy-on-write unit copies (Copies)
//	kvtier_moved_bytes_total           counter  bytes of every move down, onboard and copy (BytesMoved)
//	kvtier_recomputed_tokens_total     counter  cached tokens recomputed because a unit was dropped (RecomputedTokens)
//	kvtier_blocks_stored_total         counter  token blocks committed to the prefix tree (Stored)
//	kvtier_blocks_removed_total        counter  token blocks removed from the prefix tree (Removed)
//	kvtier_blocks_pruned_total         counter  hollow blocks pruned to bound the tree (PrunedBlocks)
//	kvtier_blocks                      gauge    token blocks in the prefix tree (Blocks)
//	kvtier_hollow_blocks               gauge    tree blocks with no bytes that no live sequence uses (HollowBlocks)
//	kvtier_block_records               gauge    live block records, tree and private (BlockRecords)
//	kvtier_metadata_bytes              gauge    estimated memory of the cache's metadata (MetadataBytes)
//	kvtier_sequences                   gauge    live sequences (Sequences)
//	kvtier_sequences_aborted_total     counter  sequences ended by Abort or a Mover's panic (Aborted)
//	kvtier_transfers_in_flight         gauge    TransferEngine transfers in flight (Transfers)
//	kvtier_events_buffered             gauge    undelivered events in the TakeEvents buffer (EventsBuffered)
//	kvtier_events_dropped_total        counter  events the full buffer dropped (EventsDropped)
//	kvtier_sink_panics_total           counter  recovered panics of the event sink (SinkPanics)
//
// # Hit rate
//
// There is no hit-rate gauge: the ratio since the cache's creation says
// little about what the cache does now and cannot be averaged over servers,
// whereas PromQL derives the rate over any window and any set of servers
// from the two counters:
//
//	sum by (tier) (rate(kvtier_tier_hits_total[5m]))
//	  / (sum by (tier) (rate(kvtier_tier_hits_total[5m])) + sum by (tier) (rate(kvtier_tier_misses_total[5m])))
//
// The GPU sees every lookup, and each tier below it the misses of the tier
// above, so the rate on the GPU is the cache's unit hit rate and the rate on
// a lower tier is the share of the GPU's misses it serves.
package promstats
