// Package progress reports how far a long example program has got: one
// line per finished job (a configuration, a phase) on a writer the program
// chooses, its standard error, so that a run of minutes shows where it is
// while what it prints on standard output stays the same.
//
// The package is internal: its API serves the examples and may change.
package progress

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Reporter counts the finished jobs of a run and writes a line for each.
// Its methods may be called from several goroutines at once. A nil
// Reporter, or one without a writer, writes nothing.
type Reporter struct {
	mu    sync.Mutex
	w     io.Writer
	name  string
	total int
	done  int
	start time.Time
}

// New returns a Reporter of a run of total jobs that writes to w, each line
// starting with name (the program's) and a colon.
func New(w io.Writer, name string, total int) *Reporter {
	return &Reporter{w: w, name: name, total: total, start: time.Now()}
}

// Done counts one more finished job and writes a line that names it, how
// many of the run's jobs are done and the time since New, such as
// "bsasim: paged/lru/1 GiB done (3/60, 12s)". A failed write is ignored:
// the lines are for whoever watches the run, never part of its output.
func (r *Reporter) Done(job string) {
	if r == nil || r.w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done++
	fmt.Fprintf(r.w, "%s: %s done (%d/%d, %s)\n", r.name, job, r.done, r.total, time.Since(r.start).Round(time.Second))
}
