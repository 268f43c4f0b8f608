package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// traceBlockTokens is the block size of the Mooncake trace: one hash id per
// 512 tokens of the prompt.
const traceBlockTokens = 512

// errBadTrace reports a trace line that cannot be replayed.
var errBadTrace = errors.New("bad trace")

// request is one line of the trace: its arrival time, its prompt length and
// the chained ids of its 512-token blocks (an id stands for its block and
// everything before it).
type request struct {
	Timestamp   int64    `json:"timestamp"` // milliseconds
	InputLength int      `json:"input_length"`
	HashIDs     []uint64 `json:"hash_ids"`
}

// lastBlockTokens is the real length of the request's last block, which the
// trace hashes even when it is partial.
func (r request) lastBlockTokens() int {
	return r.InputLength - traceBlockTokens*(len(r.HashIDs)-1)
}

// readTraceFile reads the trace at path.
func readTraceFile(path string) ([]request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readTrace(f)
}

// readTrace reads one JSON request per line. A line must have at least one
// block id, and an input length that puts 1 to 512 tokens in the last block:
// anything else would make the token hit ratio meaningless. Blank lines are
// skipped.
func readTrace(r io.Reader) ([]request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<26)
	var reqs []request
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var q request
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", errBadTrace, line, err)
		}
		if len(q.HashIDs) == 0 {
			return nil, fmt.Errorf("%w: line %d: no hash_ids", errBadTrace, line)
		}
		if last := q.lastBlockTokens(); last < 1 || last > traceBlockTokens {
			return nil, fmt.Errorf("%w: line %d: input_length %d does not fit %d blocks of %d tokens",
				errBadTrace, line, q.InputLength, len(q.HashIDs), traceBlockTokens)
		}
		reqs = append(reqs, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadTrace, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no requests", errBadTrace)
	}
	return reqs, nil
}
