package redisstore_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/kvtier/kvtier/internal/tlsfiles"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/redisstore"
	"github.com/kvtier/kvtier/tierstore/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// env returns the value of name, skipping the test when it is not set
// (and failing it in CI, where .ci/run starts the servers).
func env(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: in CI, .ci/run starts Redis with scripts/redis.sh", name)
		}
		t.Skipf("%s is not set: start Redis with scripts/redis.sh start DIR and source DIR/env", name)
	}
	return v
}

// prefix returns a key prefix of the test's own, and deletes its keys
// when the test ends.
func prefix(t testing.TB, srv server) string {
	t.Helper()
	p := fmt.Sprintf("kvt-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: srv.addrs, IsClusterMode: srv.cluster, TLSConfig: srv.tls})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			it := c.Scan(ctx, 0, p+":*", 1000).Iterator()
			for it.Next(ctx) {
				c.Del(ctx, it.Val())
			}
			return it.Err()
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, del)
		} else if sc, ok := c.(*redis.Client); ok {
			_ = del(ctx, sc)
		}
	})
	return p
}

type server struct {
	name    string
	addrs   []string
	cluster bool
	tls     *tls.Config
}

func servers(t testing.TB) []server {
	return []server{
		{name: "single", addrs: []string{env(t, "KVTIER_REDIS_ADDR")}},
		{name: "cluster", addrs: strings.Split(env(t, "KVTIER_REDIS_CLUSTER_ADDRS"), ","), cluster: true},
	}
}

func open(t testing.TB, srv server, p string, fp uint64) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(redisstore.Options{Addrs: srv.addrs, Cluster: srv.cluster, TLS: srv.tls, Prefix: p, Fingerprint: fp})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			p := prefix(t, srv)
			storetest.TestStore(t, func(t *testing.T, fp uint64) tierstore.Store { return open(t, srv, p, fp) })
		})
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []redisstore.Options{{}, {Addrs: []string{"a:1", "b:2"}}, {Addrs: []string{"a:1"}, TTL: -1}, {Addrs: []string{"a:1"}, PoolSize: -1}} {
		_, err := redisstore.Open(o)
		require.ErrorIs(t, err, tierstore.ErrInvalidConfig, "%+v", o)
	}
}

// TestPlantedValuesAreNeverServed: a corrupt value and a value written
// for other tokens under the same key (a forced collision) are reported
// corrupt, a deleted key (Redis evicted it) missing, and a server reading
// them recomputes and serves the right bytes.
func TestPlantedValuesAreNeverServed(t *testing.T) {
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			ctx := context.Background()
			p := prefix(t, srv)
			store := open(t, srv, p, storetest.Fingerprint(t))
			raw := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: srv.addrs, IsClusterMode: srv.cluster})
			defer raw.Close()
			a := storetest.NewServer(t, storetest.Config{Store: store, GPU: 16, CPU: 8, Shared: 64, WriteThrough: true})
			prompt := kvcache.Request{Tokens: storetest.Tokens(16, 1)}
			a.Serve(t, prompt)
			a.Drain(t)
			keys, err := a.Cache.UnitKeys(nil, prompt)
			require.NoError(t, err)
			have, err := store.Contains(ctx, keys)
			require.NoError(t, err)
			require.Equal(t, []bool{true, true, true, true, true, true, true, true}, have)

			// Unit 1: one byte flipped. Unit 4: a valid value for other
			// tokens. Unit 7: gone.
			v, err := raw.Get(ctx, store.Key(keys[1])).Bytes()
			require.NoError(t, err)
			v[len(v)/2] ^= 0x40
			require.NoError(t, raw.Set(ctx, store.Key(keys[1]), v, 0).Err())
			forged := keys[4]
			forged.Tokens = []uint32{7, 7, 7, 7}
			unit := make([]byte, 32)
			require.NoError(t, raw.Set(ctx, store.Key(keys[4]), tierstore.Encode(nil, storetest.Fingerprint(t), forged, unit), 0).Err())
			require.NoError(t, raw.Del(ctx, store.Key(keys[7])).Err())
			dst := [][]byte{make([]byte, 32)}
			require.ErrorIs(t, store.Get(ctx, keys[1:2], dst), kvcache.ErrUnitCorrupt)
			require.ErrorIs(t, store.Get(ctx, keys[4:5], dst), kvcache.ErrUnitCorrupt)
			require.ErrorIs(t, store.Get(ctx, keys[7:8], dst), kvcache.ErrUnitMissing)
			listKey := kvcache.UnitKey{Shared: true, Hash: 12345, Depth: 1}
			require.NoError(t, raw.RPush(ctx, store.Key(listKey), "not a string").Err())
			require.ErrorIs(t, store.Get(ctx, []kvcache.UnitKey{listKey}, dst), kvcache.ErrUnitCorrupt, "a list under a unit's key")

			// A second server adopts what the lookup finds (it asks
			// about one unit per block, so it finds all four blocks:
			// unit 7, block 3's other unit, is not asked about) and
			// recomputes what fails to load: units 1 and 4 corrupt,
			// unit 7 missing.
			b := storetest.NewServer(t, storetest.Config{Store: store, GPU: 16, CPU: 8, Shared: 64})
			plan := b.Serve(t, prompt) // checks every byte
			require.Equal(t, 16, plan.ReusedTokens, "every block adopted, and planned to load")
			st := b.Cache.Stats().Tier(3)
			require.Equal(t, uint64(8), st.Adopted)
			require.Equal(t, uint64(2), st.Corrupt)
			require.Equal(t, uint64(1), st.Missing)
		})
	}
}

// The writer process: TestMain-free helper run by TestTwoProcesses.
func TestWriterProcess(t *testing.T) {
	if os.Getenv("KVTIER_REDIS_WRITER") == "" {
		t.Skip("run by TestTwoProcesses")
	}
	srv := server{addrs: strings.Split(os.Getenv("KVTIER_REDIS_WRITER_ADDRS"), ","), cluster: os.Getenv("KVTIER_REDIS_WRITER_CLUSTER") == "1"}
	store := open(t, srv, os.Getenv("KVTIER_REDIS_WRITER_PREFIX"), storetest.Fingerprint(t))
	s := storetest.NewServer(t, storetest.Config{Store: store, GPU: 32, CPU: 8, Shared: 64, WriteThrough: true})
	prompt := kvcache.Request{Tokens: storetest.Tokens(32, 500)}
	plan := s.Serve(t, prompt)
	require.Equal(t, 0, plan.ReusedTokens)
	s.Drain(t)
	require.Equal(t, uint64(16), s.Cache.Stats().Tier(3).BackupsWritten)
	// The checksums of the bytes it computed, one line per unit.
	for sl := range 2 {
		table, err := s.Cache.BlockTable(nil, plan.Seq, sl)
		if err != nil {
			// Released: read them through a new sequence.
			break
		}
		_ = table
	}
	keys, err := s.Cache.UnitKeys(nil, prompt)
	require.NoError(t, err)
	for i, k := range keys {
		buf := make([]byte, 32)
		for o := range buf {
			buf[o] = storetest.Content(k.Hash, k.Slice, o)
		}
		fmt.Printf("unit %d %016x\n", i, xxhash.Sum64(buf))
	}
}

// TestTwoProcesses: a process computes a prompt and exits; this one reuses
// its prefix from Redis and reads back exactly the bytes it wrote; under
// another namespace it reuses nothing.
func TestTwoProcesses(t *testing.T) {
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			p := prefix(t, srv)
			cluster := "0"
			if srv.cluster {
				cluster = "1"
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestWriterProcess$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "KVTIER_REDIS_WRITER=1", "KVTIER_REDIS_WRITER_ADDRS="+strings.Join(srv.addrs, ","),
				"KVTIER_REDIS_WRITER_CLUSTER="+cluster, "KVTIER_REDIS_WRITER_PREFIX="+p)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			sums := map[int]uint64{}
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				var i int
				var sum uint64
				if n, _ := fmt.Sscanf(sc.Text(), "unit %d %x", &i, &sum); n == 2 {
					sums[i] = sum
				}
			}
			require.Len(t, sums, 16, "%s", out)

			store := open(t, srv, p, storetest.Fingerprint(t))
			s := storetest.NewServer(t, storetest.Config{Store: store, GPU: 32, CPU: 8, Shared: 64, NoLookup: true})
			prompt := kvcache.Request{Tokens: storetest.Tokens(32, 500)}
			n, err := tierstore.Lookup(context.Background(), store, s.Cache, prompt, 3)
			require.NoError(t, err)
			require.Equal(t, 8, n)
			plan, err := s.Cache.Acquire(prompt)
			require.NoError(t, err)
			require.Equal(t, 32, plan.ReusedTokens)
			redo, err := s.Cache.WaitReady(context.Background(), plan.Seq, -1)
			require.NoError(t, err)
			require.Empty(t, redo)
			for sl := range 2 {
				table, err := s.Cache.BlockTable(nil, plan.Seq, sl)
				require.NoError(t, err)
				for i, slot := range table {
					require.Equal(t, sums[i*2+sl], xxhash.Sum64(s.Memory.Bytes(kvcache.GPU, s.Cache.SlicePool(sl), slot)), "block %d slice %d", i, sl)
				}
			}
			require.NoError(t, s.Cache.Release(plan.Seq))

			other := storetest.NewServer(t, storetest.Config{Store: store, GPU: 32, CPU: 8, Shared: 64})
			plan = other.Serve(t, kvcache.Request{Tokens: prompt.Tokens, Namespace: "another tenant"})
			require.Zero(t, plan.ReusedTokens)
			require.Zero(t, other.Cache.Stats().Tier(3).Adopted)
		})
	}
}

// TestServerKilledMidRun: two servers share a standalone Redis (one of
// its own, which no other test uses) with write-through; it is killed by
// its PID in the middle of the run: the run
// goes on with every byte right, loads and writes fail and are counted;
// restarted, hits resume without restarting the caches.
func TestServerKilledMidRun(t *testing.T) {
	srv := server{name: "killable", addrs: []string{env(t, "KVTIER_REDIS_KILLABLE_ADDR")}}
	pidfile, restart := env(t, "KVTIER_REDIS_KILLABLE_PIDFILE"), env(t, "KVTIER_REDIS_KILLABLE_CMD")
	p := prefix(t, srv)
	store := open(t, srv, p, storetest.Fingerprint(t))
	up := func() error {
		// A client of its own each time: a pool that met a dead server
		// backs off before it dials again.
		raw := redis.NewClient(&redis.Options{Addr: srv.addrs[0], MaxRetries: -1})
		defer raw.Close()
		return raw.Ping(context.Background()).Err()
	}
	start := func() {
		t.Helper()
		if up() == nil {
			return
		}
		out, err := exec.Command("sh", "-c", restart).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for range 400 {
			if up() == nil {
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		t.Fatal("Redis did not come back")
	}
	t.Cleanup(start) // whatever happens, leave the server running
	var failures []error
	cfg := storetest.Config{Store: store, GPU: 16, CPU: 8, Shared: 512, WriteThrough: true, Timeout: 300 * time.Millisecond,
		OnError: func(_ kvcache.Tier, _ int, err error) { failures = append(failures, err) }}
	a, b := storetest.NewServer(t, cfg), storetest.NewServer(t, cfg)
	hits := func() uint64 { return b.Cache.Stats().Tier(3).Hits }
	round := func(base uint32) {
		prompt := kvcache.Request{Tokens: storetest.Tokens(16, base)}
		a.Serve(t, prompt)
		a.Drain(t)
		b.Serve(t, prompt)
		b.Drain(t)
	}
	for i := range 5 {
		round(uint32(10000 * (i + 1)))
	}
	before := hits()
	require.Equal(t, uint64(5*8), before, "b loads each of a's prompts from Redis")

	pid, err := os.ReadFile(pidfile)
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(n, syscall.SIGKILL))
	for range 200 {
		if up() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Error(t, up())
	for i := range 3 {
		round(uint32(10000 * (i + 10))) // every byte checked
	}
	require.Equal(t, before, hits(), "nothing loads from a dead server")
	calls, failed := a.Engine.StoreCalls()
	require.Positive(t, failed, "writes to a dead server fail (%d calls)", calls)
	require.NotEmpty(t, failures)
	require.True(t, errors.Is(failures[len(failures)-1], tierstore.ErrUnavailable))

	start()
	// The client redials on its own; a probe tells when it has.
	probe := []kvcache.UnitKey{{Shared: true, Hash: 1}}
	for i := 0; ; i++ {
		if _, err := store.Contains(context.Background(), probe); err == nil {
			break
		}
		require.Less(t, i, 500, "the store never came back")
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 5 {
		round(uint32(10000 * (i + 20)))
	}
	require.Equal(t, before+5*8, hits(), "hits resume once the server is back")
}

// TestACL: Username and Password reach the server (a user created for the
// test, allowed only its own keys); a wrong password fails every call.
func TestACL(t *testing.T) {
	srv := servers(t)[0]
	ctx := context.Background()
	p := prefix(t, srv)
	admin := redis.NewClient(&redis.Options{Addr: srv.addrs[0]})
	defer admin.Close()
	user := fmt.Sprintf("kvtier-test-%d", os.Getpid())
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", ">s3cret", "~"+p+":*", "+@all").Err())
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })

	good, err := redisstore.Open(redisstore.Options{Addrs: srv.addrs, Prefix: p, Username: user, Password: "s3cret"})
	require.NoError(t, err)
	defer good.Close()
	k := kvcache.UnitKey{Shared: true, Hash: 1, Depth: 1, Tokens: []uint32{1}}
	require.NoError(t, good.Put(ctx, []kvcache.UnitKey{k}, [][]byte{[]byte("abcd")}))
	dst := [][]byte{make([]byte, 4)}
	require.NoError(t, good.Get(ctx, []kvcache.UnitKey{k}, dst))
	require.Equal(t, "abcd", string(dst[0]))

	bad, err := redisstore.Open(redisstore.Options{Addrs: srv.addrs, Prefix: p, Username: user, Password: "wrong"})
	require.NoError(t, err)
	defer bad.Close()
	require.ErrorIs(t, bad.Get(ctx, []kvcache.UnitKey{k}, dst), tierstore.ErrUnavailable)
	// Outside its keys the user is refused.
	other, err := redisstore.Open(redisstore.Options{Addrs: srv.addrs, Prefix: p + "x", Username: user, Password: "s3cret"})
	require.NoError(t, err)
	defer other.Close()
	require.ErrorIs(t, other.Put(ctx, []kvcache.UnitKey{k}, [][]byte{[]byte("abcd")}), tierstore.ErrUnavailable)

	// Ping tells the three apart at startup, before any transfer.
	require.NoError(t, good.Ping(ctx))
	err = bad.Ping(ctx)
	require.ErrorIs(t, err, tierstore.ErrUnavailable)
	require.ErrorContains(t, err, "WRONGPASS")
	err = other.Ping(ctx)
	require.ErrorIs(t, err, tierstore.ErrUnavailable)
	require.ErrorContains(t, err, "NOPERM")
}

// TestPing: a Store's Ping passes on the standalone server and on every
// shard of the cluster, and fails, as ErrUnavailable, on an address where
// no server listens.
func TestPing(t *testing.T) {
	ctx := context.Background()
	for _, srv := range servers(t) {
		require.NoError(t, open(t, srv, prefix(t, srv), 1).Ping(ctx), srv.name)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	for _, cluster := range []bool{false, true} {
		down, err := redisstore.Open(redisstore.Options{Addrs: []string{addr}, Cluster: cluster, DialTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		err = down.Ping(ctx)
		require.ErrorIs(t, err, tierstore.ErrUnavailable, "cluster %t", cluster)
		require.NoError(t, down.Close())
	}
}

// tlsServer returns the TLS-only server scripts/redis.sh starts, with a
// client configuration that trusts its CA and shows the client
// certificate it requires.
func tlsServer(t *testing.T) server {
	t.Helper()
	addr, ca := env(t, "KVTIER_REDIS_TLS_ADDR"), env(t, "KVTIER_REDIS_TLS_CA")
	cert, key := env(t, "KVTIER_REDIS_TLS_CERT"), env(t, "KVTIER_REDIS_TLS_KEY")
	cfg, err := tlsfiles.Config(ca, cert, key)
	require.NoError(t, err)
	return server{name: "tls", addrs: []string{addr}, tls: cfg}
}

// TestTLS runs the conformance suite over TLS against a server that
// speaks nothing else and requires a client certificate, so the suite
// passes only if Options.TLS reaches every connection, certificates
// included; without TLS, without the client certificate, or without
// trusting the server's CA the store is unavailable.
func TestTLS(t *testing.T) {
	srv := tlsServer(t)
	p := prefix(t, srv)
	storetest.TestStore(t, func(t *testing.T, fp uint64) tierstore.Store { return open(t, srv, p, fp) })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := kvcache.UnitKey{Shared: true, Hash: 1, Depth: 1, Tokens: []uint32{1}}
	good := open(t, srv, p, 7)
	require.NoError(t, good.Put(ctx, []kvcache.UnitKey{k}, [][]byte{[]byte("abcd")}))
	dst := [][]byte{make([]byte, 4)}
	require.NoError(t, good.Get(ctx, []kvcache.UnitKey{k}, dst))
	require.Equal(t, "abcd", string(dst[0]))

	noCert := srv.tls.Clone()
	noCert.Certificates = nil
	untrusted := srv.tls.Clone()
	untrusted.RootCAs = x509.NewCertPool()
	for name, cfg := range map[string]*tls.Config{"plain": nil, "no client certificate": noCert, "unknown CA": untrusted} {
		bad, err := redisstore.Open(redisstore.Options{Addrs: srv.addrs, TLS: cfg, Prefix: p, Fingerprint: 7, DialTimeout: time.Second})
		require.NoError(t, err, name)
		err = bad.Get(ctx, []kvcache.UnitKey{k}, dst)
		require.ErrorIs(t, err, tierstore.ErrUnavailable, name)
		require.NoError(t, bad.Close())
	}
}

// maskedStore keeps only the low bits of every block hash in what it
// hands the store, so that different blocks collide on one key: the
// 64-bit collision the header check exists for, made frequent.
type maskedStore struct {
	tierstore.Store
	mask uint64
}

func (m maskedStore) masked(keys []kvcache.UnitKey) []kvcache.UnitKey {
	out := make([]kvcache.UnitKey, len(keys))
	for i, k := range keys {
		k.Hash &= m.mask
		out[i] = k
	}
	return out
}

func (m maskedStore) Put(ctx context.Context, keys []kvcache.UnitKey, values [][]byte) error {
	return m.Store.Put(ctx, m.masked(keys), values)
}

func (m maskedStore) Get(ctx context.Context, keys []kvcache.UnitKey, dst [][]byte) error {
	return m.Store.Get(ctx, m.masked(keys), dst)
}

func (m maskedStore) Contains(ctx context.Context, keys []kvcache.UnitKey) ([]bool, error) {
	return m.Store.Contains(ctx, m.masked(keys))
}

// TestMaskedHashCollisionsAreNeverServed: with block hashes masked to 4
// bits in the store, two servers sharing Redis overwrite each other's
// values under colliding keys all the time; every byte they serve is
// still right, the collisions are caught as corrupt and recomputed.
func TestMaskedHashCollisionsAreNeverServed(t *testing.T) {
	srv := servers(t)[0]
	p := prefix(t, srv)
	store := maskedStore{Store: open(t, srv, p, storetest.Fingerprint(t)), mask: 0xf}
	cfg := storetest.Config{Store: store, GPU: 16, CPU: 8, Shared: 256, WriteThrough: true}
	a, b := storetest.NewServer(t, cfg), storetest.NewServer(t, cfg)
	for i := range 40 {
		// Prompts that share a first block and differ after it.
		req := kvcache.Request{Tokens: append(storetest.Tokens(4, 7), storetest.Tokens(8, uint32(1000*(i%10)))...)}
		[]*storetest.Server{a, b}[i%2].Serve(t, req) // checks every byte
		a.Drain(t)
		b.Drain(t)
	}
	corrupt := a.Cache.Stats().Tier(3).Corrupt + b.Cache.Stats().Tier(3).Corrupt
	loaded := a.Cache.Stats().Tier(3).Hits + b.Cache.Stats().Tier(3).Hits
	t.Logf("units loaded from Redis %d, found corrupt (collisions) %d", loaded, corrupt)
	require.Positive(t, corrupt, "masked hashes collide")
}
