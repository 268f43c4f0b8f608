package peers_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	arc "github.com/hashicorp/golang-lru/arc/v2"
	"github.com/maypok86/otter/v2"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
)

// A stream is a sequence of keys, each one request for an object of size
// 1, replayed at several cache sizes (in objects).
type stream struct {
	name  string
	keys  []uint64
	reqs  []trace.Request // keys as package replay's requests
	sizes []int
}

const (
	zipfRequests = 2_000_000
	zipfUniverse = 1 << 20
)

// zipfKeys returns n keys drawn from Zipf(1.1) over universe keys.
func zipfKeys(n, universe int, seed uint64) []uint64 {
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, 1)), 1.1, 1, uint64(universe-1))
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = z.Uint64()
	}
	return keys
}

// scanKeys is a Zipf stream in which every fifth run of 1,000 requests is
// a scan: 1,000 keys in sequence, each never requested again.
func scanKeys(n, universe int, seed uint64) []uint64 {
	z := zipfKeys(n, universe, seed)
	next := uint64(universe) // scan keys lie above the Zipf ones
	for start := 4000; start < n; start += 5000 {
		for i := start; i < min(start+1000, n); i++ {
			z[i] = next
			next++
		}
	}
	return z
}

var sharedTraces = filepath.Join("..", "..", "..", "shared", "traces")

// cloudPhysicsKeys returns the object ids of libCacheSim's cloudPhysicsIO
// trace, or nil when the shared folder is absent.
func cloudPhysicsKeys(tb testing.TB) []uint64 {
	f, err := trace.OpenFile(filepath.Join(sharedTraces, "cloudPhysicsIO.oracleGeneral.bin"), trace.OracleGeneral, trace.Options{})
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	reqs, err := trace.Load(f)
	if err != nil {
		tb.Fatal(err)
	}
	keys := make([]uint64, len(reqs))
	for i, q := range reqs {
		keys[i] = q.ID
	}
	return keys
}

// mooncakeKeys returns the block hash ids of the Mooncake conversation
// trace, request after request, or nil when the shared folder is absent.
func mooncakeKeys(tb testing.TB) []uint64 {
	f, err := os.Open(filepath.Join(sharedTraces, "mooncake_conversation.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var keys []uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			HashIDs []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, rec.HashIDs...)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return keys
}

func streams(tb testing.TB) []stream {
	s := []stream{
		newStream("zipf", zipfKeys(zipfRequests, zipfUniverse, 1), 1<<10, 8<<10, 64<<10),
		newStream("zipf-scans", scanKeys(zipfRequests, zipfUniverse, 2), 1<<10, 8<<10, 64<<10),
	}
	if k := cloudPhysicsKeys(tb); k != nil {
		s = append(s, newStream("cloudphysics", k, 1<<10, 8<<10))
	} else {
		tb.Logf("no public traces at %s: the zipf streams only", sharedTraces)
	}
	if k := mooncakeKeys(tb); k != nil {
		s = append(s, newStream("mooncake", k, 1<<10, 8<<10))
	}
	return s
}

// newStream makes the stream of keys, its requests built once.
func newStream(name string, keys []uint64, sizes ...int) stream {
	reqs := make([]trace.Request, len(keys))
	for i, k := range keys {
		reqs[i] = trace.Request{ID: k, Size: 1}
	}
	return stream{name, keys, reqs, sizes}
}

// A contender replays a stream through one cache of size objects and
// returns its misses.
type contender struct {
	name string
	run  func(tb testing.TB, s *stream, size int) int
}

// policy replays keys through p as a classic cache (package replay, its
// own map of what is cached beside the policy's index).
func policy(name string, build func(size int) (eviction.Policy[uint64], error)) contender {
	return contender{name, func(tb testing.TB, s *stream, size int) int {
		p, err := build(size)
		if err != nil {
			tb.Fatal(err)
		}
		res, err := replay.RunRequests(p, s.reqs, replay.Config{Capacity: int64(size)})
		if err != nil {
			tb.Fatal(err)
		}
		return int(res.Misses)
	}}
}

func contenders() []contender {
	return []contender{
		policy("kvtier-wtinylfu", func(size int) (eviction.Policy[uint64], error) {
			return eviction.NewWTinyLFU[uint64](eviction.WTinyLFUConfig{Capacity: int64(size)})
		}),
		{"otter-v2", func(tb testing.TB, s *stream, size int) int {
			c := otter.Must(&otter.Options[uint64, struct{}]{MaximumSize: size})
			misses := 0
			for _, k := range s.keys {
				if _, ok := c.GetIfPresent(k); !ok {
					misses++
					c.Set(k, struct{}{})
				}
			}
			return misses
		}},
		policy("kvtier-arc", func(size int) (eviction.Policy[uint64], error) {
			return eviction.NewARC[uint64](eviction.ARCConfig{Capacity: int64(size)})
		}),
		{"golang-lru-arc", func(tb testing.TB, s *stream, size int) int {
			c, err := arc.NewARC[uint64, struct{}](size)
			if err != nil {
				tb.Fatal(err)
			}
			misses := 0
			for _, k := range s.keys {
				if _, ok := c.Get(k); !ok {
					misses++
					c.Add(k, struct{}{})
				}
			}
			return misses
		}},
		policy("kvtier-s3fifo", func(size int) (eviction.Policy[uint64], error) {
			return eviction.NewS3FIFO[uint64](eviction.S3FIFOConfig{Capacity: int64(size)})
		}),
		policy("kvtier-lru", func(int) (eviction.Policy[uint64], error) { return eviction.NewLRU[uint64](), nil }),
	}
}

// BenchmarkPeers replays each stream at each size through each contender:
// one iteration is one whole replay. miss% is the share of requests that
// missed, ns/req the wall time per request (the replay's loop and, for
// kvtier's policies, package replay's map of cached objects included).
func BenchmarkPeers(b *testing.B) {
	for _, s := range streams(b) {
		s := &s
		for _, size := range s.sizes {
			for _, c := range contenders() {
				b.Run(fmt.Sprintf("%s/%d/%s", s.name, size, c.name), func(b *testing.B) {
					b.ReportAllocs()
					misses := 0
					start := time.Now()
					for range b.N {
						misses = c.run(b, s, size)
					}
					elapsed := time.Since(start)
					b.ReportMetric(100*float64(misses)/float64(len(s.keys)), "miss%")
					b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*len(s.keys)), "ns/req")
				})
			}
		}
	}
}

// TestPeersReplay runs every contender once on a short Zipf stream, so that
// the benchmark's code is exercised by go test: each misses at least the
// keys it sees first and no more than every request.
func TestPeersReplay(t *testing.T) {
	s := newStream("zipf", zipfKeys(50_000, 1<<14, 3))
	distinct := map[uint64]bool{}
	for _, k := range s.keys {
		distinct[k] = true
	}
	for _, c := range contenders() {
		m := c.run(t, &s, 1<<10)
		if m < len(distinct) || m > len(s.keys) {
			t.Errorf("%s: %d misses of %d requests over %d keys", c.name, m, len(s.keys), len(distinct))
		}
	}
}

// BenchmarkWTinyLFUSettings replays the Zipf stream (1K objects) and
// cloudPhysicsIO (8K objects) through W-TinyLFU with other windows and
// sketch sizes than the defaults, reporting miss% (the settings' effect,
// deterministic; one iteration is one replay).
func BenchmarkWTinyLFUSettings(b *testing.B) {
	type run struct {
		s    stream
		size int
	}
	runs := []run{{newStream("zipf", zipfKeys(zipfRequests, zipfUniverse, 1)), 1 << 10}}
	if k := cloudPhysicsKeys(b); k != nil {
		runs = append(runs, run{newStream("cloudphysics", k), 8 << 10})
	}
	for _, r := range runs {
		for _, cfg := range []struct {
			name   string
			window float64
			keys   int // times the size
		}{
			{"window0.001", 0.001, 1}, {"window0.01", 0.01, 1}, {"window0.05", 0.05, 1}, {"window0.2", 0.2, 1},
			{"window0.8", 0.8, 1}, {"keys0.25x", 0.01, 0}, {"keys16x", 0.01, 16},
		} {
			b.Run(fmt.Sprintf("%s/%d/%s", r.s.name, r.size, cfg.name), func(b *testing.B) {
				keys := cfg.keys * r.size
				if cfg.keys == 0 {
					keys = r.size / 4
				}
				c := policy("", func(size int) (eviction.Policy[uint64], error) {
					return eviction.NewWTinyLFU[uint64](eviction.WTinyLFUConfig{Capacity: int64(size), Keys: keys, WindowRatio: cfg.window})
				})
				misses := 0
				for range b.N {
					misses = c.run(b, &r.s, r.size)
				}
				b.ReportMetric(100*float64(misses)/float64(len(r.s.keys)), "miss%")
			})
		}
	}
}
