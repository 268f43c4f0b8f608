package progress_test

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/internal/progress"
)

// Every job gets one whole line, with the count of jobs done so far, even
// when jobs finish on several goroutines at once.
func TestDoneWritesOneLinePerJob(t *testing.T) {
	var buf bytes.Buffer
	r := progress.New(&buf, "sim", 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Done("lru/1 GiB")
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 8)
	line := regexp.MustCompile(`^sim: lru/1 GiB done \((\d)/8, \d+s\)$`)
	for i, l := range lines {
		m := line.FindStringSubmatch(l)
		require.NotNil(t, m, l)
		assert.Equal(t, string(rune('1'+i)), m[1], "lines are numbered in the order written")
	}
}

// A nil Reporter and one without a writer write nothing and do not panic.
func TestNilReporterIsSilent(t *testing.T) {
	var r *progress.Reporter
	r.Done("job")
	progress.New(nil, "sim", 1).Done("job")
}
