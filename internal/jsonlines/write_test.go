package jsonlines

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type row struct {
	Policy string  `json:"policy"`
	Hit    float64 `json:"hit"`
	hidden int
}

func TestWriteOneObjectPerLine(t *testing.T) {
	rows := []row{{"lru", 0.5, 1}, {"fifo", 0.25, 2}}
	var b bytes.Buffer
	require.NoError(t, Write(&b, rows))
	require.Equal(t, "{\"policy\":\"lru\",\"hit\":0.5}\n{\"policy\":\"fifo\",\"hit\":0.25}\n", b.String())
	// Lines decode back to the exported fields.
	sc := bufio.NewScanner(&b)
	var got []row
	for sc.Scan() {
		var r row
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		got = append(got, r)
	}
	require.Equal(t, []row{{Policy: "lru", Hit: 0.5}, {Policy: "fifo", Hit: 0.25}}, got)

	b.Reset()
	require.NoError(t, Write[row](&b, nil))
	require.Empty(t, b.String())
}

func TestWriteStopsAtFirstError(t *testing.T) {
	var b bytes.Buffer
	err := Write(&b, []row{{"lru", 1, 0}, {"bad", math.NaN(), 0}, {"fifo", 1, 0}})
	var unsupported *json.UnsupportedValueError
	require.True(t, errors.As(err, &unsupported), "%v", err)
	require.Equal(t, 1, strings.Count(b.String(), "\n"), "the row before the error stays written")

	errWrite := errors.New("disk full")
	err = Write(failingWriter{errWrite}, []row{{"lru", 1, 0}})
	require.ErrorIs(t, err, errWrite)
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }
