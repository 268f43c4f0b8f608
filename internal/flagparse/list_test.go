package flagparse

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var policies = []string{"lru", "fifo", "s3fifo", "prio-lru"}

func TestSplit(t *testing.T) {
	require.Equal(t, []string{"a", "b c", "d"}, Split(" a,b c ,, d,"))
	require.Nil(t, Split(""))
	require.Nil(t, Split(" , "))
}

func TestNames(t *testing.T) {
	got, err := Names("s3fifo, LRU,prio-lru,", policies)
	require.NoError(t, err)
	require.Equal(t, []string{"s3fifo", "lru", "prio-lru"}, got, "order given, spelled as known")

	for s, sentinel := range map[string]error{
		"lru,opt":   ErrUnknownName,
		"lru,Lru":   ErrRepeated,
		"":          ErrEmpty,
		" ,":        ErrEmpty,
		"lru,fifo-": ErrUnknownName,
	} {
		_, err := Names(s, policies)
		require.ErrorIs(t, err, sentinel, "%q", s)
	}
	_, err = Names("lru,opt", policies)
	require.EqualError(t, err, `flagparse: unknown name "opt" (want one of lru, fifo, s3fifo, prio-lru)`)
}

func TestNameSetDropsRepeats(t *testing.T) {
	got, err := NameSet("fifo,lru,FIFO,lru", policies)
	require.NoError(t, err)
	require.Equal(t, []string{"fifo", "lru"}, got)
	_, err = NameSet("fifo,mru", policies)
	require.ErrorIs(t, err, ErrUnknownName)
	_, err = NameSet(",", policies)
	require.ErrorIs(t, err, ErrEmpty)
}

func TestFloats(t *testing.T) {
	got, err := Floats("1, 3.5,0.25,2,")
	require.NoError(t, err)
	require.Equal(t, []float64{1, 3.5, 0.25, 2}, got)
	for _, s := range []string{"1,x", "NaN", "1,Inf", "1e999"} {
		_, err := Floats(s)
		require.ErrorIs(t, err, ErrNumber, "%q", s)
	}
	_, err = Floats("")
	require.ErrorIs(t, err, ErrEmpty)
}

// FuzzNames: any list either fails with one of the list sentinels or gives
// distinct known names, in the order of their first appearance in s (a
// reference computed here by plain string search).
func FuzzNames(f *testing.F) {
	f.Add("lru,fifo")
	f.Add(" S3FIFO ,, prio-lru,lru")
	f.Add("lru,lru")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		for _, set := range []bool{false, true} {
			got, err := names(s, policies, set)
			if err != nil {
				require.True(t, errorsIsAny(err, ErrEmpty, ErrUnknownName, ErrRepeated), "%v", err)
				continue
			}
			require.NotEmpty(t, got)
			items := Split(s)
			if !set {
				require.Len(t, got, len(items))
			}
			for i, n := range got {
				require.Contains(t, policies, n)
				require.False(t, slices.Contains(got[:i], n), "repeat %q", n)
			}
			// Order of first appearance.
			var want []string
			for _, it := range items {
				for _, k := range policies {
					if strings.EqualFold(k, it) && !slices.Contains(want, k) {
						want = append(want, k)
					}
				}
			}
			require.Equal(t, want, got)
		}
	})
}

// FuzzFloats: a parsed list holds only finite numbers, one per item.
func FuzzFloats(f *testing.F) {
	f.Add("1,2.5")
	f.Add("x")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Floats(s)
		if err != nil {
			require.True(t, errorsIsAny(err, ErrEmpty, ErrNumber), "%v", err)
			return
		}
		require.Len(t, got, len(Split(s)))
		for _, v := range got {
			require.False(t, math.IsNaN(v) || math.IsInf(v, 0))
		}
	})
}
