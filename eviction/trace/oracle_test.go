package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// sharedTrace returns the path of a file in ../../../shared/traces (the
// project's shared folder seen from eviction/trace), skipping the test when
// the folder is absent, as it is in a fresh clone.
func sharedTrace(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "..", "shared", "traces", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared trace %s not available (%v): skipping; it lives in ../shared/traces beside the project", p, err)
	}
	return p
}

func randomRequests(rng *rand.Rand, n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{
			Time:       int64(rng.Uint32()),
			ID:         rng.Uint64(),
			Size:       int64(rng.Uint32()),
			NextAccess: rng.Int64N(1<<40) - 1,
		}
	}
	return reqs
}

func encode(t testing.TB, reqs []Request) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewOracleGeneralWriter(&buf)
	for _, q := range reqs {
		require.NoError(t, w.Write(q))
	}
	require.NoError(t, w.Flush())
	return buf.Bytes()
}

func TestOracleGeneralRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := randomRequests(rng, 5000) // several bufio buffers' worth
	data := encode(t, reqs)
	require.Len(t, data, len(reqs)*OracleGeneralRecordSize)

	got, err := Load(NewOracleGeneralReader(bytes.NewReader(data)))
	require.NoError(t, err)
	require.Equal(t, reqs, got)
}

func TestOracleGeneralLayout(t *testing.T) {
	// One record written by hand, field by field, little-endian.
	rec := make([]byte, 24)
	binary.LittleEndian.PutUint32(rec[0:], 7)
	binary.LittleEndian.PutUint64(rec[4:], 0x0102030405060708)
	binary.LittleEndian.PutUint32(rec[12:], 4096)
	binary.LittleEndian.PutUint64(rec[16:], uint64(math.MaxInt64)) // "never" in some tools
	r := NewOracleGeneralReader(bytes.NewReader(rec))
	var q Request
	require.NoError(t, r.Next(&q))
	require.Equal(t, Request{Time: 7, ID: 0x0102030405060708, Size: 4096, NextAccess: -1}, q)
	require.Equal(t, int64(24), r.Offset())
	require.ErrorIs(t, r.Next(&q), io.EOF)
	require.ErrorIs(t, r.Next(&q), io.EOF, "EOF repeats")
}

func TestOracleGeneralTruncated(t *testing.T) {
	data := encode(t, randomRequests(rand.New(rand.NewPCG(3, 4)), 3))
	r := NewOracleGeneralReader(bytes.NewReader(data[:2*24+10]))
	var q Request
	require.NoError(t, r.Next(&q))
	require.NoError(t, r.Next(&q))
	err := r.Next(&q)
	require.ErrorIs(t, err, ErrTruncated)
	require.Contains(t, err.Error(), "offset 48")
	require.Contains(t, err.Error(), "10 of 24")
}

func TestOracleGeneralReaderError(t *testing.T) {
	boom := errors.New("disk on fire")
	r := NewOracleGeneralReader(io.MultiReader(bytes.NewReader(make([]byte, 24)), errReader{boom}))
	var q Request
	require.NoError(t, r.Next(&q))
	err := r.Next(&q)
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, ErrTruncated)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestOracleGeneralWriterRejects(t *testing.T) {
	w := NewOracleGeneralWriter(io.Discard)
	for _, q := range []Request{
		{Time: -1, Size: 1, NextAccess: -1},
		{Time: math.MaxUint32 + 1, Size: 1, NextAccess: -1},
		{Size: -1, NextAccess: -1},
		{Size: math.MaxUint32 + 1, NextAccess: -1},
		{Size: 1, NextAccess: -2},
	} {
		require.ErrorIs(t, w.Write(q), ErrMalformed, "%+v", q)
	}
}

func TestOracleGeneralCloudPhysics(t *testing.T) {
	path := sharedTrace(t, "cloudPhysicsIO.oracleGeneral.bin")
	f, err := OpenFile(path, OracleGeneral, Options{})
	require.NoError(t, err)
	defer f.Close()
	reqs, err := Load(f)
	require.NoError(t, err)

	// Totals published in the trace's README (and libCacheSim's tests).
	require.Len(t, reqs, 113872)
	var bytesTotal int64
	for i, q := range reqs {
		require.Positive(t, q.Size, "request %d", i)
		bytesTotal += q.Size
	}
	require.Equal(t, int64(4368040448), bytesTotal)

	// next_access_vtime is the 1-based position of the next request for the
	// same object (computed here by a backward scan), or -1.
	next := map[uint64]int64{}
	for i := len(reqs) - 1; i >= 0; i-- {
		want, ok := next[reqs[i].ID]
		if !ok {
			want = -1
		}
		require.Equal(t, want, reqs[i].NextAccess, "request %d", i)
		next[reqs[i].ID] = int64(i + 1)
	}
	require.Equal(t, Request{Time: 5633898, ID: 42932745, Size: 512, NextAccess: -1}, reqs[0])

	// The text version holds the same id stream.
	tf, err := OpenFile(sharedTrace(t, "cloudPhysicsIO.txt"), Text, Options{})
	require.NoError(t, err)
	defer tf.Close()
	treqs, err := Load(tf)
	require.NoError(t, err)
	require.Len(t, treqs, len(reqs))
	for i := range reqs {
		require.Equal(t, reqs[i].ID, treqs[i].ID, "request %d", i)
		require.Equal(t, int64(1), treqs[i].Size)
	}
}
