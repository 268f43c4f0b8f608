// Package peers holds no code: its benchmarks replay the same request
// streams through kvtier's eviction policies and through other Go caches
// that implement the same algorithms (github.com/maypok86/otter/v2, whose
// eviction is W-TinyLFU with an adaptive window, and
// github.com/hashicorp/golang-lru/arc/v2), and report each one's miss ratio
// and CPU per request side by side. The peers are imported by the tests
// only, so no importer of kvtier's packages depends on them.
//
// The streams: Zipf(1.1) over a million keys, the same with scans of keys
// never seen again mixed in, and the public traces (libCacheSim's
// cloudPhysicsIO as object ids, the Mooncake conversation trace as block
// hash ids) when ../shared/traces is present. BENCHMARKS.md has the
// figures and the command.
package peers
