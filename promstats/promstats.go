package promstats

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvtier/kvtier/kvcache"
)

// DefaultNamespace is the namespace of the metrics when Options.Namespace is
// empty.
const DefaultNamespace = "kvtier"

// TierLabel is the name of the label that carries a tier's name
// (kvcache.TierStats.Name) on the per-tier metrics.
const TierLabel = "tier"

// NamespaceLabel is the name of the label that carries a namespace on the
// metrics of the shares of a tier (kvcache.TierStats.Shares).
const NamespaceLabel = "namespace"

// Options configures a Collector.
type Options struct {
	// Namespace is the first component of every metric name; empty means
	// DefaultNamespace.
	Namespace string
	// ConstLabels are added to every metric, e.g. the server or the model
	// the cache serves, so that several caches can be told apart in one
	// process or one Prometheus. They must not include TierLabel or
	// NamespaceLabel.
	ConstLabels prometheus.Labels
}

// Collector is a prometheus.Collector that reports the statistics of one
// kvcache.Cache. Each Collect takes one snapshot (Cache.Stats), so the
// metrics of one scrape are consistent with each other. A Collector holds no
// state but its cache and its descriptors: it is safe for concurrent use,
// and several registries may collect it.
type Collector struct {
	cache  *kvcache.Cache
	tiers  []tierMetric
	shares []shareMetric
	global []cacheMetric
}

// shareMetric is a per-share metric: one sample per share of a tier,
// labelled TierLabel and NamespaceLabel.
type shareMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(kvcache.ShareStats) float64
}

// tierMetric is a per-tier metric: one sample per tier, labelled TierLabel.
type tierMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(kvcache.TierStats) float64
}

// cacheMetric is a cache-wide metric: one sample.
type cacheMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(kvcache.Stats) float64
}

// spec names and describes a metric before its descriptor is built.
type spec[S any] struct {
	name  string
	help  string
	typ   prometheus.ValueType
	value func(S) float64
}

// NewCollector returns a Collector over c. It does not call c; register it
// with a prometheus.Registerer to export the metrics. A constant label named
// TierLabel, or a name the prometheus package rejects, makes the
// registration fail with an error.
func NewCollector(c *kvcache.Cache, opts Options) *Collector {
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	col := &Collector{cache: c}
	for _, s := range tierSpecs() {
		col.tiers = append(col.tiers, tierMetric{
			desc:  prometheus.NewDesc(prometheus.BuildFQName(ns, "tier", s.name), s.help, []string{TierLabel}, opts.ConstLabels),
			typ:   s.typ,
			value: s.value,
		})
	}
	for _, s := range shareSpecs() {
		col.shares = append(col.shares, shareMetric{
			desc:  prometheus.NewDesc(prometheus.BuildFQName(ns, "share", s.name), s.help, []string{TierLabel, NamespaceLabel}, opts.ConstLabels),
			typ:   s.typ,
			value: s.value,
		})
	}
	for _, s := range cacheSpecs() {
		col.global = append(col.global, cacheMetric{
			desc:  prometheus.NewDesc(prometheus.BuildFQName(ns, "", s.name), s.help, nil, opts.ConstLabels),
			typ:   s.typ,
			value: s.value,
		})
	}
	return col
}

// Describe sends the descriptor of every metric the Collector reports. It
// implements prometheus.Collector.
func (col *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range col.tiers {
		ch <- m.desc
	}
	for _, m := range col.shares {
		ch <- m.desc
	}
	for _, m := range col.global {
		ch <- m.desc
	}
}

// Collect takes one snapshot of the cache's statistics (Cache.Stats, which
// holds the cache's lock briefly) and sends every metric: the per-tier ones
// once per tier, the cache-wide ones once. It implements
// prometheus.Collector.
func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	st := col.cache.Stats()
	for _, m := range col.tiers {
		for _, t := range st.Tiers {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(t), t.Name)
		}
	}
	for _, m := range col.shares {
		for _, t := range st.Tiers {
			for _, sh := range t.Shares {
				ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(sh), t.Name, sh.Namespace)
			}
		}
	}
	for _, m := range col.global {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(st))
	}
}

// The Collector exports hit and miss counters but no hit-rate gauge: a gauge
// could only be the ratio since the cache's creation, which hides what the
// cache does now and cannot be averaged over servers, while PromQL derives
// the rate over any window and set of servers from the counters (see the
// package documentation).

const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// tierSpecs returns the per-tier metrics, in the order doc.go lists them.
func tierSpecs() []spec[kvcache.TierStats] {
	type t = kvcache.TierStats
	return []spec[t]{
		{"hits_total", "Unit lookups that found the unit on the tier (the tiers below the GPU see the GPU's misses).", counter, func(s t) float64 { return float64(s.Hits) }},
		{"misses_total", "Unit lookups that reached the tier and did not find the unit on it.", counter, func(s t) float64 { return float64(s.Misses) }},
		{"evictions_total", "Units the tier's eviction policies chose as victims.", counter, func(s t) float64 { return float64(s.Evictions) }},
		{"drops_total", "Victims of the tier that were dropped instead of moved down a tier.", counter, func(s t) float64 { return float64(s.Drops) }},
		{"moved_in_total", "Units the tier received from the tier above.", counter, func(s t) float64 { return float64(s.MovedIn) }},
		{"moved_in_bytes_total", "Bytes of the units the tier received from the tier above.", counter, func(s t) float64 { return float64(s.MovedInBytes) }},
		{"failed_total", "Units whose asynchronous transfer into the tier failed.", counter, func(s t) float64 { return float64(s.Failed) }},
		{"lost_total", "Units dropped because a Mover panicked during a batch that would have written their slots.", counter, func(s t) float64 { return float64(s.Lost) }},
		{"missing_total", "Units of failed loads from the tier that the store reported missing; they were recomputed.", counter, func(s t) float64 { return float64(s.Missing) }},
		{"corrupt_total", "Units of failed loads from the tier that the store reported corrupt; they were recomputed.", counter, func(s t) float64 { return float64(s.Corrupt) }},
		{"adopted_total", "Units Cache.Adopt registered on the tier.", counter, func(s t) float64 { return float64(s.Adopted) }},
		{"backups_written_total", "Backups the write-through tier received.", counter, func(s t) float64 { return float64(s.BackupsWritten) }},
		{"backups", "Slots of the write-through tier that hold backups of units on the tiers above.", gauge, func(s t) float64 { return float64(s.Backups) }},
		{"capacity_slots", "Unit slots of the tier: free, pinned and cached.", gauge, func(s t) float64 { return float64(s.Capacity) }},
		{"free_slots", "Unit slots of the tier that hold no unit.", gauge, func(s t) float64 { return float64(s.Free) }},
		{"pinned_slots", "Unit slots of the tier that hold a pinned unit.", gauge, func(s t) float64 { return float64(s.Pinned) }},
		{"cached_slots", "Unit slots of the tier that hold an evictable cached unit.", gauge, func(s t) float64 { return float64(s.Cached) }},
		{"capacity_bytes", "Bytes of the tier's unit slots.", gauge, func(s t) float64 { return float64(s.CapacityBytes) }},
		{"free_bytes", "Bytes of the tier's free slots.", gauge, func(s t) float64 { return float64(s.FreeBytes) }},
		{"pinned_bytes", "Bytes of the tier's slots that hold a pinned unit.", gauge, func(s t) float64 { return float64(s.PinnedBytes) }},
		{"cached_bytes", "Bytes of the tier's slots that hold an evictable cached unit.", gauge, func(s t) float64 { return float64(s.CachedBytes) }},
	}
}

// shareSpecs returns the per-share metrics, in the order doc.go lists them.
func shareSpecs() []spec[kvcache.ShareStats] {
	type t = kvcache.ShareStats
	return []spec[t]{
		{"used_slots", "Slots of the tier that hold the namespace's units.", gauge, func(s t) float64 { return float64(s.Used) }},
		{"reserved_slots", "Slots of the tier the namespace's share reserves: no other namespace evicts it below them.", gauge, func(s t) float64 { return float64(s.Reserved) }},
		{"cap_slots", "The most slots of the tier the namespace's units may hold.", gauge, func(s t) float64 { return float64(s.Cap) }},
		{"evictions_total", "Units of the namespace the tier evicted.", counter, func(s t) float64 { return float64(s.Evictions) }},
		{"drops_at_cap_total", "Units of the namespace dropped instead of entering the tier, the namespace at its cap with no unit there to lose.", counter, func(s t) float64 { return float64(s.DropsAtCap) }},
	}
}

// cacheSpecs returns the cache-wide metrics, in the order doc.go lists them.
func cacheSpecs() []spec[kvcache.Stats] {
	type s = kvcache.Stats
	return []spec[s]{
		{"offloads_total", "Units moved down a tier.", counter, func(st s) float64 { return float64(st.Offloads) }},
		{"onboards_total", "Units copied to the GPU from a lower tier.", counter, func(st s) float64 { return float64(st.Onboards) }},
		{"copies_total", "Copy-on-write unit copies.", counter, func(st s) float64 { return float64(st.Copies) }},
		{"moved_bytes_total", "Bytes of every move down, onboard and copy-on-write copy.", counter, func(st s) float64 { return float64(st.BytesMoved) }},
		{"recomputed_tokens_total", "Tokens of cached blocks that requests had to recompute because a unit was dropped.", counter, func(st s) float64 { return float64(st.RecomputedTokens) }},
		{"blocks_stored_total", "Token blocks committed to the prefix tree.", counter, func(st s) float64 { return float64(st.Stored) }},
		{"blocks_removed_total", "Token blocks removed from the prefix tree.", counter, func(st s) float64 { return float64(st.Removed) }},
		{"blocks_pruned_total", "Hollow token blocks removed, with their subtrees, to keep the prefix tree within its bound.", counter, func(st s) float64 { return float64(st.PrunedBlocks) }},
		{"blocks", "Token blocks in the prefix tree.", gauge, func(st s) float64 { return float64(st.Blocks) }},
		{"hollow_blocks", "Token blocks in the prefix tree that hold no bytes and that no live sequence uses.", gauge, func(st s) float64 { return float64(st.HollowBlocks) }},
		{"block_records", "Live block records: the prefix tree's blocks and the sequences' private blocks.", gauge, func(st s) float64 { return float64(st.BlockRecords) }},
		{"metadata_bytes", "Estimated memory of the cache's metadata: block records, unit tables, tree nodes and policy entries.", gauge, func(st s) float64 { return float64(st.MetadataBytes) }},
		{"sequences", "Live sequences.", gauge, func(st s) float64 { return float64(st.Sequences) }},
		{"sequences_aborted_total", "Sequences ended by Abort or by a Mover's panic.", counter, func(st s) float64 { return float64(st.Aborted) }},
		{"transfers_in_flight", "Transfers of the TransferEngine that are started or waiting for one they read from.", gauge, func(st s) float64 { return float64(st.Transfers) }},
		{"events_buffered", "Events waiting in the TakeEvents buffer (not yet delivered).", gauge, func(st s) float64 { return float64(st.EventsBuffered) }},
		{"events_dropped_total", "Events the full TakeEvents buffer dropped.", counter, func(st s) float64 { return float64(st.EventsDropped) }},
		{"sink_panics_total", "Panics of the event sink, recovered.", counter, func(st s) float64 { return float64(st.SinkPanics) }},
	}
}
