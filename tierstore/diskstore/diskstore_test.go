package diskstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/diskstore"
	"github.com/kvtier/kvtier/tierstore/storetest"
	"github.com/stretchr/testify/require"
)

const testFP = 0x5eed_0f_d15c

// key returns the key of slice sl of a first block of tokens under
// namespace ns.
func key(hash uint64, sl int, ns string, tokens ...uint32) kvcache.UnitKey {
	return kvcache.UnitKey{Shared: true, Hash: hash, Depth: 1, Slice: sl,
		Keys: radix.Keys{Namespace: ns}, Tokens: tokens}
}

// payload returns n bytes that depend on seed.
func payload(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7+i/251)
	}
	return b
}

func open(t *testing.T, dir string, maxBytes int64) *diskstore.Store {
	t.Helper()
	s, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: testFP, MaxBytes: maxBytes})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// fileSize is the size of the file of k holding n payload bytes.
func fileSize(k kvcache.UnitKey, n int) int64 { return int64(tierstore.HeaderSize(k) + n + 8) }

func get(s *diskstore.Store, k kvcache.UnitKey, n int) ([]byte, error) {
	dst := make([]byte, n)
	err := s.Get(context.Background(), []kvcache.UnitKey{k}, [][]byte{dst})
	return dst, err
}

func contains(t *testing.T, s *diskstore.Store, keys ...kvcache.UnitKey) []bool {
	t.Helper()
	has, err := s.Contains(context.Background(), keys)
	require.NoError(t, err)
	return has
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 64<<20)
	ctx := context.Background()
	var keys []kvcache.UnitKey
	var values [][]byte
	for i := range 8 {
		keys = append(keys, key(uint64(1000+i), i%2, "", uint32(i), 2, 3))
		values = append(values, payload(byte(i), 1<<10))
	}
	keys = append(keys, key(77, 0, "tenant", 9, 9))
	values = append(values, payload(42, 1<<20))
	require.NoError(t, s.Put(ctx, keys, values))

	dst := make([][]byte, len(values))
	for i := range dst {
		dst[i] = make([]byte, len(values[i]))
	}
	require.NoError(t, s.Get(ctx, keys, dst))
	for i := range values {
		require.Equal(t, values[i], dst[i], "unit %d", i)
	}
	require.Equal(t, []bool{true, true, true, true, true, true, true, true, true}, contains(t, s, keys...))

	// The file is named by Name under Dir and holds exactly Encode's bytes.
	for i, k := range keys {
		path := filepath.Join(dir, tierstore.Name(testFP, k, '/'))
		require.Equal(t, path, s.Path(k))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, tierstore.Encode(nil, testFP, k, values[i]), b)
	}
	var want int64
	for i, k := range keys {
		want += fileSize(k, len(values[i]))
	}
	files, n := s.Usage()
	require.Equal(t, len(keys), files)
	require.Equal(t, want, n)

	// Storing a unit again overwrites it with equal bytes and counts once.
	require.NoError(t, s.Put(ctx, keys[:1], values[:1]))
	files, n = s.Usage()
	require.Equal(t, len(keys), files)
	require.Equal(t, want, n)

	// No temporary file is left behind.
	require.Empty(t, tempFiles(t, dir))
}

func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var tmp []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".tmp") {
			tmp = append(tmp, path)
		}
		return err
	}))
	return tmp
}

// TestNamesAreSafePaths checks the assumption the file names rest on:
// every element of Name is hexadecimal digits, "-" and decimal digits,
// whatever the namespace and LoRA hold, so the path stays under Dir.
func TestNamesAreSafePaths(t *testing.T) {
	elem := regexp.MustCompile(`^(-|h[0-9a-f]{16}|([0-9a-f]{2})+)$`)
	last := regexp.MustCompile(`^[0-9a-f]{16}-[0-9]+$`)
	dir := filepath.Join(t.TempDir(), "store")
	for _, ns := range []string{"", "a", "../..", "/etc/passwd", "a/b\\c", "\x00", ".", "..", "ü-tenant", "C:\\x", strings.Repeat("x", 100)} {
		for _, lora := range []string{"", "../lora", "-", "."} {
			for _, sl := range []int{0, 1, 17, 1 << 20} {
				k := kvcache.UnitKey{Shared: true, Hash: 0xfedcba9876543210, Slice: sl, Keys: radix.Keys{Namespace: ns, LoRA: lora}}
				name := tierstore.Name(^uint64(0), k, '/')
				parts := strings.Split(name, "/")
				require.Len(t, parts, 4, name)
				require.Regexp(t, `^[0-9a-f]{16}$`, parts[0])
				require.Regexp(t, elem, parts[1])
				require.Regexp(t, elem, parts[2])
				require.Regexp(t, last, parts[3])
				path := filepath.Join(dir, name)
				rel, err := filepath.Rel(dir, path)
				require.NoError(t, err)
				require.Equal(t, filepath.FromSlash(name), rel)
			}
		}
	}
	// Different namespaces and LoRAs never share a directory.
	a := tierstore.Name(1, kvcache.UnitKey{Keys: radix.Keys{Namespace: "ab"}}, '/')
	b := tierstore.Name(1, kvcache.UnitKey{Keys: radix.Keys{Namespace: "a", LoRA: "b"}}, '/')
	require.NotEqual(t, a, b)
}

func TestWarmRestart(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	ctx := context.Background()
	keys := []kvcache.UnitKey{key(1, 0, "", 1, 2), key(1, 1, "", 1, 2), key(2, 0, "ns", 3, 4)}
	values := [][]byte{payload(1, 1000), payload(2, 1000), payload(3, 1000)}
	require.NoError(t, s.Put(ctx, keys, values))
	files, n := s.Usage()
	require.NoError(t, s.Close())

	// Leftovers: an old temporary file (a crashed Put) is removed, a fresh
	// one (a Put running in another process) and stray files are left
	// alone and not counted.
	unitDir := filepath.Dir(s.Path(keys[0]))
	oldTmp := filepath.Join(unitDir, "0000000000000001-0.123.tmp")
	newTmp := filepath.Join(unitDir, "0000000000000001-0.456.tmp")
	stray := filepath.Join(unitDir, "README")
	strayTop := filepath.Join(dir, "notes.txt")
	for _, p := range []string{oldTmp, newTmp, stray, strayTop} {
		require.NoError(t, os.WriteFile(p, []byte("junk"), 0o600))
	}
	old := time.Now().Add(-2 * time.Minute)
	require.NoError(t, os.Chtimes(oldTmp, old, old))

	s2 := open(t, dir, 1<<20)
	files2, n2 := s2.Usage()
	require.Equal(t, files, files2)
	require.Equal(t, n, n2)
	require.Equal(t, []bool{true, true, true}, contains(t, s2, keys...))
	for i, k := range keys {
		got, err := get(s2, k, len(values[i]))
		require.NoError(t, err)
		require.Equal(t, values[i], got)
	}
	require.NoFileExists(t, oldTmp)
	require.FileExists(t, newTmp)
	require.FileExists(t, stray)
	require.FileExists(t, strayTop)
}

// TestRestartOrder: Open indexes files oldest first, so the next eviction
// removes the files its predecessor used least recently; a smaller bound
// trims at Open.
func TestRestartOrder(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	ctx := context.Background()
	keys := make([]kvcache.UnitKey, 4)
	for i := range keys {
		keys[i] = key(uint64(10+i), 0, "", uint32(i))
		require.NoError(t, s.Put(ctx, keys[i:i+1], [][]byte{payload(byte(i), 1000)}))
	}
	size := fileSize(keys[0], 1000)
	// Make keys[2] the oldest, then keys[0], keys[3], keys[1].
	base := time.Now().Add(-time.Hour)
	for i, age := range []int{2, 4, 1, 3} {
		mt := base.Add(time.Duration(age) * time.Minute)
		require.NoError(t, os.Chtimes(s.Path(keys[i]), mt, mt))
	}
	require.NoError(t, s.Close())

	s2 := open(t, dir, 3*size)
	files, n := s2.Usage()
	require.Equal(t, 3, files)
	require.Equal(t, 3*size, n)
	require.Equal(t, []bool{true, true, false, true}, contains(t, s2, keys...))

	k := key(99, 0, "", 99)
	require.NoError(t, s2.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(9, 1000)}))
	require.Equal(t, []bool{false, true, false, true, true}, contains(t, s2, append(keys, k)...))
}

// TestTwoProcesses: two stores over one directory, as two servers on one
// machine; one writes, the other reads. Concurrent writers and readers of
// the same units never see part of a file.
func TestTwoProcesses(t *testing.T) {
	dir := t.TempDir()
	a, b := open(t, dir, 64<<20), open(t, dir, 64<<20)
	ctx := context.Background()
	k := key(5, 1, "shared", 5, 6, 7)
	v := payload(5, 4096)

	_, err := get(b, k, len(v))
	require.ErrorIs(t, err, kvcache.ErrUnitMissing)
	require.NoError(t, a.Put(ctx, []kvcache.UnitKey{k}, [][]byte{v}))
	require.Equal(t, []bool{true}, contains(t, b, k))
	got, err := get(b, k, len(v))
	require.NoError(t, err)
	require.Equal(t, v, got)
	// b now knows the file too.
	files, _ := b.Usage()
	require.Equal(t, 1, files)

	// a removes it (as its eviction would): b misses and forgets it.
	require.NoError(t, os.Remove(a.Path(k)))
	_, err = get(b, k, len(v))
	require.ErrorIs(t, err, kvcache.ErrUnitMissing)
	files, _ = b.Usage()
	require.Zero(t, files)

	keys := make([]kvcache.UnitKey, 8)
	values := make([][]byte, len(keys))
	for i := range keys {
		keys[i] = key(uint64(100+i), 0, "shared", uint32(i))
		values[i] = payload(byte(i), 64<<10)
	}
	var wg sync.WaitGroup
	for w, s := range []*diskstore.Store{a, b, a, b} {
		wg.Go(func() {
			for range 5 {
				if w%2 == 0 {
					if err := s.Put(ctx, keys, values); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				for i, k := range keys {
					got, err := get(s, k, len(values[i]))
					switch {
					case errors.Is(err, kvcache.ErrUnitMissing):
					case err != nil:
						t.Error(err)
						return
					case !bytes.Equal(got, values[i]):
						t.Errorf("unit %d: read other bytes", i)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, tempFiles(t, dir))
}

func TestNamespacesAndFingerprints(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	ctx := context.Background()
	k := key(7, 0, "alice", 1, 2, 3)
	v := payload(7, 512)
	require.NoError(t, s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{v}))

	other := k
	other.Keys.Namespace = "bob"
	_, err := get(s, other, len(v))
	require.ErrorIs(t, err, kvcache.ErrUnitMissing)
	lora := k
	lora.Keys.LoRA = "adapter"
	_, err = get(s, lora, len(v))
	require.ErrorIs(t, err, kvcache.ErrUnitMissing)
	require.Equal(t, []bool{true, false, false}, contains(t, s, k, other, lora))

	d, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: testFP + 1, MaxBytes: 1 << 20})
	require.NoError(t, err)
	defer d.Close()
	files, _ := d.Usage()
	require.Zero(t, files, "another deployment's files are not indexed")
	_, err = get(d, k, len(v))
	require.ErrorIs(t, err, kvcache.ErrUnitMissing)
	require.Equal(t, []bool{false}, contains(t, d, k))
}

func TestCorruption(t *testing.T) {
	ctx := context.Background()
	const n = 1000
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey)
	}{
		{"flipped payload byte", func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey) {
			b, err := os.ReadFile(s.Path(k))
			require.NoError(t, err)
			b[tierstore.HeaderSize(k)+8+n/2] ^= 0x20
			require.NoError(t, os.WriteFile(s.Path(k), b, 0o600))
		}},
		{"flipped header byte", func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey) {
			b, err := os.ReadFile(s.Path(k))
			require.NoError(t, err)
			b[5] ^= 1
			require.NoError(t, os.WriteFile(s.Path(k), b, 0o600))
		}},
		{"truncated", func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey) {
			require.NoError(t, os.Truncate(s.Path(k), fileSize(k, n)-5))
		}},
		{"empty", func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey) {
			require.NoError(t, os.Truncate(s.Path(k), 0))
		}},
		{"appended", func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey) {
			f, err := os.OpenFile(s.Path(k), os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte{0})
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		{"hash collision", func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey) {
			// Another block with the same hash and slice: a valid value
			// of another unit, at k's path.
			k2 := k
			k2.Tokens = []uint32{4, 5, 6}
			require.Equal(t, s.Path(k), s.Path(k2))
			require.NoError(t, os.WriteFile(s.Path(k), tierstore.Encode(nil, testFP, k2, payload(9, n)), 0o600))
		}},
		{"other deployment", func(t *testing.T, s *diskstore.Store, k kvcache.UnitKey) {
			require.NoError(t, os.WriteFile(s.Path(k), tierstore.Encode(nil, testFP+1, k, payload(9, n)), 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, t.TempDir(), 1<<20)
			k := key(11, 1, "", 1, 2, 3)
			v := payload(11, n)
			require.NoError(t, s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{v}))
			tc.damage(t, s, k)

			dst := make([]byte, n)
			err := s.Get(ctx, []kvcache.UnitKey{k}, [][]byte{dst})
			require.ErrorIs(t, err, kvcache.ErrUnitCorrupt)
			require.Contains(t, err.Error(), s.Path(k))
			require.True(t, strings.HasPrefix(err.Error(), "diskstore: "), err.Error())
			require.NotEqual(t, v, dst, "corrupt bytes must not be served")
			// The corrupt file is gone, and so is its index entry.
			require.NoFileExists(t, s.Path(k))
			require.Equal(t, []bool{false}, contains(t, s, k))
			files, bytes := s.Usage()
			require.Zero(t, files)
			require.Zero(t, bytes)
			_, err = get(s, k, n)
			require.ErrorIs(t, err, kvcache.ErrUnitMissing)
		})
	}

	// A payload of another size than the buffer is corrupt too.
	s := open(t, t.TempDir(), 1<<20)
	k := key(12, 0, "", 1)
	require.NoError(t, s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(1, n)}))
	_, err := get(s, k, n+1)
	require.ErrorIs(t, err, kvcache.ErrUnitCorrupt)
}

func TestSizeBound(t *testing.T) {
	dir := t.TempDir()
	const n = 1000
	keys := make([]kvcache.UnitKey, 6)
	for i := range keys {
		keys[i] = key(uint64(20+i), 0, "", uint32(i), 1, 2)
	}
	size := fileSize(keys[0], n)
	maxBytes := 3*size + size/2
	s := open(t, dir, maxBytes)
	ctx := context.Background()
	put := func(i int) {
		t.Helper()
		require.NoError(t, s.Put(ctx, keys[i:i+1], [][]byte{payload(byte(i), n)}))
		_, bytes := s.Usage()
		require.LessOrEqual(t, bytes, maxBytes)
	}

	for i := range 5 {
		put(i)
	}
	require.Equal(t, []bool{false, false, true, true, true}, contains(t, s, keys[:5]...))
	require.NoFileExists(t, s.Path(keys[0]))
	require.NoFileExists(t, s.Path(keys[1]))
	files, bytes := s.Usage()
	require.Equal(t, 3, files)
	require.Equal(t, 3*size, bytes)

	// A Get refreshes a unit: LRU, not FIFO.
	got, err := get(s, keys[2], n)
	require.NoError(t, err)
	require.Equal(t, payload(2, n), got)
	put(5)
	require.Equal(t, []bool{true, false, true, true}, contains(t, s, keys[2], keys[3], keys[4], keys[5]))

	// A batch larger than the bound keeps its last units.
	require.NoError(t, s.Put(ctx, keys[:5], [][]byte{payload(0, n), payload(1, n), payload(2, n), payload(3, n), payload(4, n)}))
	require.Equal(t, []bool{false, false, true, true, true, false}, contains(t, s, keys...))

	// A unit larger than the bound is not kept.
	big := key(30, 0, "", 30)
	require.NoError(t, s.Put(ctx, []kvcache.UnitKey{big}, [][]byte{payload(3, int(maxBytes))}))
	require.Equal(t, []bool{false}, contains(t, s, big))
	files, bytes = s.Usage()
	require.Zero(t, files)
	require.Zero(t, bytes)

	// A file another process removed first is no error.
	put(0)
	put(1)
	put(2)
	require.NoError(t, os.Remove(s.Path(keys[0])))
	put(3)
	require.Equal(t, []bool{false, true, true, true}, contains(t, s, keys[:4]...))
}

func TestMissingAndContext(t *testing.T) {
	s := open(t, t.TempDir(), 1<<20)
	k := key(40, 0, "", 1)
	_, err := get(s, k, 10)
	require.ErrorIs(t, err, kvcache.ErrUnitMissing)
	require.Contains(t, err.Error(), s.Path(k))
	require.Equal(t, []bool{false}, contains(t, s, k))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(1, 10)})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, tierstore.ErrUnavailable)
	require.NoFileExists(t, s.Path(k))
	require.NoError(t, s.Put(context.Background(), []kvcache.UnitKey{k}, [][]byte{payload(1, 10)}))
	err = s.Get(ctx, []kvcache.UnitKey{k}, [][]byte{make([]byte, 10)})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Contains(ctx, []kvcache.UnitKey{k})
	require.ErrorIs(t, err, context.Canceled)

	// Empty batches are fine; mismatched ones are refused.
	require.NoError(t, s.Put(context.Background(), nil, nil))
	require.NoError(t, s.Get(context.Background(), nil, nil))
	require.ErrorIs(t, s.Put(context.Background(), []kvcache.UnitKey{k}, nil), kvcache.ErrInvalidCopy)
	require.ErrorIs(t, s.Get(context.Background(), []kvcache.UnitKey{k}, nil), kvcache.ErrInvalidCopy)
}

func TestOptionsAndClose(t *testing.T) {
	for _, opts := range []diskstore.Options{
		{MaxBytes: 1},
		{Dir: t.TempDir()},
		{Dir: t.TempDir(), MaxBytes: -1},
	} {
		_, err := diskstore.Open(opts)
		require.ErrorIs(t, err, tierstore.ErrInvalidConfig, "%+v", opts)
		require.True(t, strings.HasPrefix(err.Error(), "diskstore: "))
	}
	_, err := diskstore.Open(diskstore.Options{Dir: t.TempDir(), MaxBytes: -7})
	require.ErrorContains(t, err, "-7")

	// Open creates a missing directory; a file in the way is an error.
	dir := filepath.Join(t.TempDir(), "a", "b")
	s, err := diskstore.Open(diskstore.Options{Dir: dir, MaxBytes: 1 << 20, Sync: true})
	require.NoError(t, err)
	require.DirExists(t, dir)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = diskstore.Open(diskstore.Options{Dir: file, MaxBytes: 1})
	require.ErrorIs(t, err, tierstore.ErrUnavailable)

	// With Sync.
	ctx := context.Background()
	k := key(50, 0, "", 1)
	require.NoError(t, s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(1, 100)}))
	got, err := get(s, k, 100)
	require.NoError(t, err)
	require.Equal(t, payload(1, 100), got)

	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(1, 100)}), tierstore.ErrClosed)
	_, err = get(s, k, 100)
	require.ErrorIs(t, err, tierstore.ErrClosed)
	_, err = s.Contains(ctx, []kvcache.UnitKey{k})
	require.ErrorIs(t, err, tierstore.ErrClosed)
	// The files stay.
	require.FileExists(t, s.Path(k))
}

// TestUnavailable: a file where a directory of names should be makes
// every operation on its units fail with ErrUnavailable, naming the path.
func TestUnavailable(t *testing.T) {
	s := open(t, t.TempDir(), 1<<20)
	k := key(1, 0, "blocked", 1)
	nsDir := filepath.Dir(filepath.Dir(s.Path(k)))
	require.NoError(t, os.MkdirAll(filepath.Dir(nsDir), 0o700))
	require.NoError(t, os.WriteFile(nsDir, []byte("in the way"), 0o600))
	ctx := context.Background()
	err := s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(1, 10)})
	require.ErrorIs(t, err, tierstore.ErrUnavailable)
	require.ErrorContains(t, err, nsDir)
	_, err = get(s, k, 10)
	require.ErrorIs(t, err, tierstore.ErrUnavailable)
	require.ErrorContains(t, err, nsDir)
	_, err = s.Contains(ctx, []kvcache.UnitKey{k})
	require.ErrorIs(t, err, tierstore.ErrUnavailable)
	files, _ := s.Usage()
	require.Zero(t, files)

	// Other units are unaffected.
	k2 := key(1, 0, "free", 1)
	require.NoError(t, s.Put(ctx, []kvcache.UnitKey{k2}, [][]byte{payload(1, 10)}))
}

// tiny is a layout of 2 slices of 32-byte units, 4 tokens per block.
func tiny(t *testing.T) *layout.Layout {
	t.Helper()
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	require.NoError(t, err)
	return l
}

// server is a cache whose third tier is a diskstore, as a server process
// holds it.
type server struct {
	c     *kvcache.Cache
	mem   *kvcache.MemoryStore
	eng   *tierstore.Engine
	store *diskstore.Store
}

func newServer(t *testing.T, l *layout.Layout, dir string) *server {
	t.Helper()
	tiers := []kvcache.TierConfig{
		{Name: "GPU", Capacity: kvcache.Capacity{Units: 8}},
		{Name: "CPU", Capacity: kvcache.Capacity{Units: 8}},
		{Name: "disk", Capacity: kvcache.Capacity{Units: 64}},
	}
	mem, err := kvcache.NewMemoryStore(l, tiers[:2])
	require.NoError(t, err)
	store, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: tierstore.Fingerprint("tiny", l, 0), MaxBytes: 1 << 20})
	require.NoError(t, err)
	eng, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: store}})
	require.NoError(t, err)
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: eng})
	require.NoError(t, err)
	srv := &server{c: c, mem: mem, eng: eng, store: store}
	t.Cleanup(srv.close)
	return srv
}

func (srv *server) close() {
	srv.eng.Close()
	_ = srv.store.Close()
}

// settle waits until no transfer is in flight.
func (srv *server) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for srv.c.Stats().Transfers > 0 {
		require.True(t, time.Now().Before(deadline), "transfers did not finish")
		_, err := srv.c.Poll()
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
	}
}

// ready waits until sequence seq waits on no transfer and returns the
// ranges to recompute.
func (srv *server) ready(t *testing.T, seq kvcache.SeqID) []kvcache.TokenRange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	recompute, err := srv.c.WaitReady(ctx, seq, -1)
	require.NoError(t, err)
	return recompute
}

// pattern is the byte a prompt's KV holds at offset i of slice sl of
// block b.
func pattern(prompt, b, sl, i int) byte { return byte(prompt*64 + b*8 + sl*4 + i) }

// slots calls f with every GPU slot of seq's blocks.
func (srv *server) slots(t *testing.T, seq kvcache.SeqID, f func(b, sl int, slot []byte)) {
	t.Helper()
	for sl := range srv.c.Layout().UnitsPerBlock() {
		table, err := srv.c.BlockTable(nil, seq, sl)
		require.NoError(t, err)
		for b, slot := range table {
			require.GreaterOrEqual(t, slot, int32(0))
			f(b, sl, srv.mem.Bytes(kvcache.GPU, srv.c.SlicePool(sl), slot))
		}
	}
}

// TestCacheWarmRestart runs a cache whose third tier is a diskstore: its
// units move down to disk; a new cache over the same directory adopts
// them (tierstore.Lookup) and loads the bytes the first one wrote; a
// damaged file is recomputed, never served.
func TestCacheWarmRestart(t *testing.T) {
	l := tiny(t)
	dir := t.TempDir()
	prompts := make([]kvcache.Request, 3)
	for p := range prompts {
		tokens := make([]uint32, 16)
		for i := range tokens {
			tokens[i] = uint32(1000*(p+1) + i)
		}
		prompts[p] = kvcache.Request{Tokens: tokens, Namespace: "tenant"}
	}

	first := newServer(t, l, dir)
	for p, req := range prompts {
		plan, err := first.c.Acquire(req)
		require.NoError(t, err)
		require.Zero(t, plan.ReusedTokens)
		// Write the prompt's KV once the slots' old contents have moved
		// down.
		require.Empty(t, first.ready(t, plan.Seq))
		first.slots(t, plan.Seq, func(b, sl int, slot []byte) {
			for i := range slot {
				slot[i] = pattern(p, b, sl, i)
			}
		})
		require.NoError(t, first.c.Commit(plan.Seq, len(req.Tokens)))
		require.NoError(t, first.c.Release(plan.Seq))
	}
	first.settle(t)
	st := first.c.Stats()
	require.Equal(t, int64(8), st.Tier(3).Cached, "the first prompt's units are on disk")
	files, _ := first.store.Usage()
	require.Equal(t, 8, files)
	first.close()

	// A warm restart: a new cache over the same directory.
	second := newServer(t, l, dir)
	ctx := context.Background()
	n, err := tierstore.Lookup(ctx, second.store, second.c, prompts[0], 3)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	n, err = tierstore.Lookup(ctx, second.store, second.c, prompts[1], 3)
	require.NoError(t, err)
	require.Zero(t, n, "the second prompt never reached the disk")

	plan, err := second.c.Acquire(prompts[0])
	require.NoError(t, err)
	require.Equal(t, 16, plan.ReusedTokens)
	require.Empty(t, second.ready(t, plan.Seq))
	var r kvcache.Readiness
	require.NoError(t, second.c.Readiness(plan.Seq, &r))
	require.Zero(t, r.Pending)
	require.Empty(t, r.Recompute)
	second.slots(t, plan.Seq, func(b, sl int, slot []byte) {
		for i, got := range slot {
			if want := pattern(0, b, sl, i); got != want {
				t.Fatalf("block %d slice %d byte %d: %d, want %d", b, sl, i, got, want)
			}
		}
	})
	st = second.c.Stats()
	require.Zero(t, st.Tier(3).Corrupt)
	require.Equal(t, uint64(8), st.Onboards)
	calls, failed := second.eng.StoreCalls()
	require.Positive(t, calls)
	require.Zero(t, failed)
	require.NoError(t, second.c.Release(plan.Seq))
	second.settle(t)
	second.close()

	// Damage the file of the first block's first slice: a third cache
	// adopts the blocks, fails the load and recomputes.
	keys, err := second.c.UnitKeys(nil, prompts[0])
	require.NoError(t, err)
	path := second.store.Path(keys[0])
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[tierstore.HeaderSize(keys[0])+8+3] ^= 0xff
	require.NoError(t, os.WriteFile(path, b, 0o600))

	third := newServer(t, l, dir)
	n, err = tierstore.Lookup(ctx, third.store, third.c, prompts[0], 3)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	plan, err = third.c.Acquire(prompts[0])
	require.NoError(t, err)
	recompute := third.ready(t, plan.Seq)
	require.NotEmpty(t, recompute)
	require.Positive(t, third.c.Stats().Tier(3).Corrupt)
	require.NoFileExists(t, path, "the corrupt file is removed")
	require.NoError(t, third.c.Abort(plan.Seq))
	third.settle(t)
}

func TestErrorMessages(t *testing.T) {
	s := open(t, t.TempDir(), 1<<20)
	k := key(60, 3, "", 1)
	_, err := get(s, k, 1)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "diskstore: "), msg)
	require.Contains(t, msg, fmt.Sprintf("%016x-%d", k.Hash, k.Slice))
}

// TestLongNamespaceSurvivesRestart: a namespace too long to spell in a
// file name is stored under its hash and found again after a restart.
func TestLongNamespaceSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: 3, MaxBytes: 1 << 20})
	require.NoError(t, err)
	k := kvcache.UnitKey{Shared: true, Hash: 5, Depth: 1, Keys: radix.Keys{Namespace: strings.Repeat("tenant", 40)}, Tokens: []uint32{1, 2}}
	require.NoError(t, s.Put(context.Background(), []kvcache.UnitKey{k}, [][]byte{[]byte("abcd")}))
	require.NoError(t, s.Close())
	s, err = diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: 3, MaxBytes: 1 << 20})
	require.NoError(t, err)
	files, _ := s.Usage()
	require.Equal(t, 1, files)
	dst := make([]byte, 4)
	require.NoError(t, s.Get(context.Background(), []kvcache.UnitKey{k}, [][]byte{dst}))
	require.Equal(t, "abcd", string(dst))
}

func TestConformance(t *testing.T) {
	dir := t.TempDir()
	storetest.TestStore(t, func(t *testing.T, fp uint64) tierstore.Store {
		s, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: fp, MaxBytes: 64 << 20})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
