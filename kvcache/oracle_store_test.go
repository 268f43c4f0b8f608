package kvcache_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/diskstore"
)

// oracleHashSeed is the hash seed of the servers that share a store: equal
// prompts get equal unit keys on both.
const oracleHashSeed = 0x6f7261636c65

// newStoreOracle builds a server like newOracle's whose cache has a third
// tier, shared, kept in store (a tierstore.Engine moves its units), which
// it asks before each request (tierstore.Lookup adopts what the store
// holds). With writeThrough, every block committed on the GPU or the CPU
// gets a copy in the store as soon as the server's transfers run;
// otherwise blocks reach it only as victims that the CPU moves down.
func newStoreOracle(t testing.TB, cfg oracleConfig, store tierstore.Store, shared int, writeThrough bool) (*oracleServer, func()) {
	t.Helper()
	m, lay := oracleLayout(t, cfg)
	units := int64(lay.UnitsPerBlock())
	tiers := []kvcache.TierConfig{
		{Capacity: kvcache.Capacity{Units: int64(cfg.gpu) * units}, Policy: cfg.policy()},
		{Capacity: kvcache.Capacity{Units: int64(cfg.cpu) * units}, Policy: cfg.policy()},
		{Name: "shared", Capacity: kvcache.Capacity{Units: int64(shared) * units}, Policy: cfg.policy(), WriteThrough: writeThrough},
	}
	mem, err := kvcache.NewMemoryStore(lay, tiers[:2])
	if err != nil {
		t.Fatal(err)
	}
	e, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: store}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := kvcache.New(kvcache.Config{Layout: lay, Tiers: tiers, Engine: e, HashSeed: oracleHashSeed})
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	s, err := newOracleServer(c, mem, m, true)
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	s.lookup = func(req kvcache.Request) error {
		_, err := tierstore.Lookup(context.Background(), store, c, req, 3)
		return err
	}
	return s, e.Close
}

// lossyStore is a MemStore that loses or corrupts a unit of every 4th Put
// after storing it, as a store's own eviction or a bad disk would.
type lossyStore struct {
	*tierstore.MemStore
	mu   sync.Mutex
	puts int
}

func (l *lossyStore) Put(ctx context.Context, keys []kvcache.UnitKey, values [][]byte) error {
	if err := l.MemStore.Put(ctx, keys, values); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.puts++
	switch k := keys[len(keys)/2]; l.puts % 8 {
	case 0:
		l.Delete(k)
	case 4:
		if v := slices.Clone(l.Value(k)); len(v) > 0 {
			v[len(v)-1] ^= 0x10
			l.Set(k, v)
		}
	}
	return nil
}

// TestModelOracleSharedStore: two servers, each a cache over its own GPU and CPU
// memory, share a store as their third tier and serve one workload in
// turns, asking the store before every request. A prefix one server
// computed reaches the store (written through, or moved down as the CPU
// evicts it), and the other adopts it (tierstore.Lookup, Cache.Adopt) and
// loads it instead of computing it: every logits vector and every K/V
// vector of both stays bit for bit the no-cache run's.
func TestModelOracleSharedStore(t *testing.T) {
	// (At least 32 requests: fewer may push nothing down to the store.)
	n := max(oracleRequests(t), 32)
	for _, tc := range []struct {
		name         string
		cfg          oracleConfig
		writeThrough bool
		lossy        bool
	}{
		{"paged-writethrough", oracleConfig{kind: layout.PagedLayer, policy: kvcache.LRUPolicy, gpu: 24, cpu: 12}, true, false},
		{"paged-windows-offload", oracleConfig{kind: layout.PagedLayer, windows: []int{0, 20, 0, 12}, policy: kvcache.LRUPolicy, gpu: 20, cpu: 4}, false, false},
		{"bsa-mla-offload", oracleConfig{kind: layout.BSA, mla: 12, policy: kvcache.FIFOPolicy, gpu: 20, cpu: 2}, false, false},
		{"paged-writethrough-lossy", oracleConfig{kind: layout.PagedLayer, policy: kvcache.LRUPolicy, gpu: 24, cpu: 12}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, lay := oracleLayout(t, tc.cfg)
			mem := tierstore.NewMemStore(tierstore.Fingerprint("oracle", lay, oracleHashSeed))
			var store tierstore.Store = mem
			if tc.lossy {
				store = &lossyStore{MemStore: mem}
			}
			var servers [2]*oracleServer
			for i := range servers {
				s, done := newStoreOracle(t, tc.cfg, store, 400, tc.writeThrough)
				defer done()
				servers[i] = s
			}
			r := newOracleRun(t, 1)
			for i := range n {
				r.serve(servers[i%2], 1) // request i on server i%2
			}
			if r.served < n/2 {
				t.Fatalf("only %d of %d requests served", r.served, n)
			}
			var lost, adopted, loaded uint64
			for i, s := range servers {
				st := s.c.Stats().Tier(3)
				lost += st.Missing + st.Corrupt
				adopted += st.Adopted
				loaded += st.Hits
				t.Logf("server %d: %d units adopted, %d loaded from the store, %d missing, %d corrupt; %d logits and %d K/V vectors identical",
					i, st.Adopted, st.Hits, st.Missing, st.Corrupt, s.logitsSeen.Load(), s.kvSeen.Load())
			}
			if adopted == 0 || loaded == 0 {
				t.Fatalf("the servers adopted %d units from the store and loaded %d: the store was not exercised", adopted, loaded)
			}
			if tc.lossy && lost == 0 {
				t.Fatal("no load met a lost or corrupt value: the lossy store was not exercised")
			}
		})
	}
}

// TestModelOracleWarmRestart: a server writes through to a disk store
// (tierstore/diskstore) as its third tier while it serves half the
// workload, then stops; a new server, its process restarted, opens the
// same directory, asks it before every request (tierstore.Lookup adopts
// what the files hold) and serves the rest, loading what the first one
// computed: every output of both stays bit for bit the no-cache run's.
func TestModelOracleWarmRestart(t *testing.T) {
	n := max(oracleRequests(t), 32)
	cfg := oracleConfig{kind: layout.PagedLayer, windows: []int{0, 20, 0, 12}, policy: kvcache.LRUPolicy, gpu: 24, cpu: 12}
	_, lay := oracleLayout(t, cfg)
	dir := t.TempDir()
	open := func() *diskstore.Store {
		st, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: tierstore.Fingerprint("oracle", lay, oracleHashSeed), MaxBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	r := newOracleRun(t, 3)

	store := open()
	first, done := newStoreOracle(t, cfg, store, 400, true)
	r.serve(first, n/2)
	// The first server stops once its writes reached the disk.
	for k := 0; first.c.Stats().Transfers > 0; k++ {
		if k > 10000 {
			t.Fatal("transfers never drain")
		}
		select {
		case <-first.c.Completed():
		case <-time.After(10 * time.Millisecond):
		}
		if _, err := first.c.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	written := first.c.Stats().Tier(3).BackupsWritten
	done()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store = open()
	defer store.Close()
	second, done := newStoreOracle(t, cfg, store, 400, true)
	defer done()
	r.serve(second, n-n/2)
	if r.served < n/2 {
		t.Fatalf("only %d of %d requests served", r.served, n)
	}
	st := second.c.Stats().Tier(3)
	if written == 0 || st.Adopted == 0 || st.Hits == 0 {
		t.Fatalf("the first server wrote %d units to disk; after the restart %d were adopted and %d loaded: the restart was not exercised", written, st.Adopted, st.Hits)
	}
	t.Logf("%d units written before the restart; after it %d adopted, %d loaded, %d missing, %d corrupt; %d and %d logits identical",
		written, st.Adopted, st.Hits, st.Missing, st.Corrupt, first.logitsSeen.Load(), second.logitsSeen.Load())
}
