package trace

import (
	"io"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
)

func TestCSVReader(t *testing.T) {
	in := "ts,op,size,key\n" +
		"100,get,4096,7\n" +
		"\n" +
		"101.9, set ,\"512\", 8 \n" +
		"102,get,0,7\n"
	r, err := NewCSVReader(strings.NewReader(in), CSVConfig{HasHeader: true, TimeColumn: 1, IDColumn: 4, SizeColumn: 3})
	require.NoError(t, err)
	got, err := Load(r)
	require.NoError(t, err)
	require.Equal(t, []Request{
		{Time: 100, ID: 7, Size: 4096, NextAccess: -1},
		{Time: 101, ID: 8, Size: 512, NextAccess: -1},
		{Time: 102, ID: 7, Size: 0, NextAccess: -1},
	}, got)
}

func TestCSVReaderDefaultsAndDelimiter(t *testing.T) {
	r, err := NewCSVReader(strings.NewReader("a;x\nb;y\na;z\n"), CSVConfig{Delimiter: ';', IDColumn: 1, HashIDs: true})
	require.NoError(t, err)
	got, err := Load(r)
	require.NoError(t, err)
	require.Equal(t, []Request{
		{Time: 0, ID: xxhash.Sum64String("a"), Size: 1, NextAccess: -1},
		{Time: 1, ID: xxhash.Sum64String("b"), Size: 1, NextAccess: -1},
		{Time: 2, ID: xxhash.Sum64String("a"), Size: 1, NextAccess: -1},
	}, got)
}

func TestCSVReaderMalformed(t *testing.T) {
	cfg := CSVConfig{TimeColumn: 1, IDColumn: 2, SizeColumn: 3}
	cases := map[string]string{
		"1,2,3\n1,x,3\n":     "line 2",
		"1,2,3\n1,2\n":       "line 2",
		"1,2,-3\n":           "line 1",
		"1,2,3.5\n":          "line 1",
		"t,2,3\n":            "line 1",
		"1,2,3\n\n1,\"2,3\n": "line 3",
		"nan,2,3\n":          "line 1",
		"1e300,2,3\n":        "line 1",
	}
	for in, where := range cases {
		r, err := NewCSVReader(strings.NewReader(in), cfg)
		require.NoError(t, err)
		_, err = Load(r)
		require.ErrorIs(t, err, ErrMalformed, "%q", in)
		require.Contains(t, err.Error(), where, "%q", in)
		var q Request
		require.ErrorIs(t, r.Next(&q), ErrMalformed, "errors are sticky")
	}
}

func TestCSVReaderEmptyHashedID(t *testing.T) {
	r, err := NewCSVReader(strings.NewReader(" ,1\n"), CSVConfig{IDColumn: 1, HashIDs: true})
	require.NoError(t, err)
	var q Request
	require.ErrorIs(t, r.Next(&q), ErrMalformed)
}

func TestCSVReaderHeaderOnly(t *testing.T) {
	r, err := NewCSVReader(strings.NewReader("id\n"), CSVConfig{IDColumn: 1, HasHeader: true})
	require.NoError(t, err)
	var q Request
	require.ErrorIs(t, r.Next(&q), io.EOF)
}

func TestCSVConfigInvalid(t *testing.T) {
	for _, cfg := range []CSVConfig{
		{IDColumn: 0},
		{IDColumn: 1, TimeColumn: -1},
		{IDColumn: 1, SizeColumn: -2},
		{IDColumn: 1, Delimiter: '"'},
		{IDColumn: 1, Delimiter: '\n'},
		{IDColumn: 1, Delimiter: -5},
	} {
		_, err := NewCSVReader(strings.NewReader(""), cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
	}
}
