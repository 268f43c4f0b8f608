package trace

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"oracleGeneral": OracleGeneral, "ORACLEGENERAL": OracleGeneral, "txt": Text, "plainTxt": Text, "csv": CSV} {
		f, err := ParseFormat(in)
		require.NoError(t, err, in)
		require.Equal(t, want, f, in)
		g, err := ParseFormat(f.String())
		require.NoError(t, err)
		require.Equal(t, f, g, "String round-trips")
	}
	_, err := ParseFormat("vscsi")
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.Equal(t, "Format(9)", Format(9).String())
}

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "t.csv")
	require.NoError(t, os.WriteFile(csvPath, []byte("5,100\n6,200\n"), 0o600))
	f, err := OpenFile(csvPath, CSV, Options{CSV: CSVConfig{IDColumn: 1, SizeColumn: 2}})
	require.NoError(t, err)
	reqs, err := Load(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, []Request{{Time: 0, ID: 5, Size: 100, NextAccess: -1}, {Time: 1, ID: 6, Size: 200, NextAccess: -1}}, reqs)

	_, err = OpenFile(csvPath, CSV, Options{})
	require.ErrorIs(t, err, ErrInvalidConfig, "CSV without an id column")
	_, err = OpenFile(csvPath, Format(0), Options{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = OpenFile(filepath.Join(dir, "missing"), Text, Options{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestSliceReader(t *testing.T) {
	reqs := []Request{{ID: 1, Size: 1}, {ID: 2, Size: 1}, {ID: 3, Size: 1}}
	s := NewSliceReader(reqs)
	require.Equal(t, 3, s.Len())
	var q Request
	require.NoError(t, s.Next(&q))
	require.Equal(t, uint64(1), q.ID)
	require.Equal(t, reqs[1:], s.Rest())
	require.Equal(t, 0, s.Len())
	require.Error(t, s.Next(&q))
	s.Reset()
	got, err := Load(s)
	require.NoError(t, err)
	require.Equal(t, reqs, got)
	var zero SliceReader
	require.Error(t, zero.Next(&q), "the zero SliceReader is empty")
}
