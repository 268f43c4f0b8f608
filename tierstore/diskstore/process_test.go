package diskstore_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/tierstore/diskstore"
	"github.com/kvtier/kvtier/tierstore/storetest"
	"github.com/stretchr/testify/require"
)

// TestWriterProcess is the other process of TestTwoProcessesShareADirectory.
func TestWriterProcess(t *testing.T) {
	dir := os.Getenv("KVTIER_DISK_WRITER_DIR")
	if dir == "" {
		t.Skip("run by TestTwoProcessesShareADirectory")
	}
	s, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: storetest.Fingerprint(t), MaxBytes: 1 << 20})
	require.NoError(t, err)
	srv := storetest.NewServer(t, storetest.Config{Store: s, GPU: 32, CPU: 8, Shared: 64, WriteThrough: true})
	plan := srv.Serve(t, kvcache.Request{Tokens: storetest.Tokens(32, 900)})
	require.Zero(t, plan.ReusedTokens)
	srv.Drain(t)
	require.Equal(t, uint64(16), srv.Cache.Stats().Tier(3).BackupsWritten)
}

// TestTwoProcessesShareADirectory: one process computes a prompt and
// exits; this one, over the same directory, loads its prefix (every byte
// checked) instead of computing it.
func TestTwoProcessesShareADirectory(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KVTIER_DISK_WRITER_DIR="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	s, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: storetest.Fingerprint(t), MaxBytes: 1 << 20})
	require.NoError(t, err)
	files, _ := s.Usage()
	require.Equal(t, 16, files)
	srv := storetest.NewServer(t, storetest.Config{Store: s, GPU: 32, CPU: 8, Shared: 64})
	plan := srv.Serve(t, kvcache.Request{Tokens: storetest.Tokens(32, 900)})
	require.Equal(t, 32, plan.ReusedTokens)
	st := srv.Cache.Stats()
	require.Equal(t, uint64(16), st.Tier(3).Adopted)
	require.Equal(t, uint64(16), st.Onboards)
	require.Zero(t, st.Tier(kvcache.GPU).Failed)
}
