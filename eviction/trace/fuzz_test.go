package trace

import (
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// FuzzOracleGeneralReader checks the binary reader against a direct decode:
// every whole record comes back field for field, and a partial tail is
// reported as ErrTruncated, never a panic.
func FuzzOracleGeneralReader(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 24))
	f.Add(make([]byte, 30))
	f.Add(bytes.Repeat([]byte{0xff}, 48))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewOracleGeneralReader(bytes.NewReader(data))
		whole := len(data) / OracleGeneralRecordSize
		var q Request
		for i := 0; i < whole; i++ {
			if err := r.Next(&q); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			rec := data[i*24 : (i+1)*24]
			na := int64(binary.LittleEndian.Uint64(rec[16:]))
			if na == math.MaxInt64 {
				na = -1
			}
			want := Request{
				Time:       int64(binary.LittleEndian.Uint32(rec)),
				ID:         binary.LittleEndian.Uint64(rec[4:]),
				Size:       int64(binary.LittleEndian.Uint32(rec[12:])),
				NextAccess: na,
			}
			if q != want {
				t.Fatalf("record %d: got %+v want %+v", i, q, want)
			}
		}
		err := r.Next(&q)
		if len(data)%OracleGeneralRecordSize == 0 {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("want EOF, got %v", err)
			}
		} else if !errors.Is(err, ErrTruncated) {
			t.Fatalf("want ErrTruncated, got %v", err)
		}
	})
}

// FuzzTextReader checks the text reader against a reference built from the
// standard library: the ids of the non-blank lines parsed by strconv, in
// order, with the same verdict on bad lines.
func FuzzTextReader(f *testing.F) {
	for _, s := range []string{"", "1\n2\n", " 3 \r\n\n4", "x\n", "18446744073709551616\n", "+1\n", "\t\n9"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Load(NewTextReader(bytes.NewReader(data), TextConfig{}))

		var want []uint64
		var wantErr bool
		for _, line := range strings.Split(string(data), "\n") {
			if len(line) > maxLineBytes {
				wantErr = true
				break
			}
			field := strings.TrimSpace(line)
			if field == "" {
				continue
			}
			v, perr := strconv.ParseUint(field, 10, 64)
			if perr != nil || field[0] == '+' || strings.ContainsRune(field, '_') {
				wantErr = true
				break
			}
			want = append(want, v)
		}
		if wantErr != (err != nil) {
			t.Fatalf("error %v, reference says error=%v", err, wantErr)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d requests, reference %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != (Request{Time: int64(i), ID: want[i], Size: 1, NextAccess: -1}) {
				t.Fatalf("request %d: %+v, want id %d", i, got[i], want[i])
			}
		}
	})
}

// FuzzCSVReader feeds arbitrary bytes to the CSV reader (it must fail only
// with ErrMalformed and never panic) and checks that a record formatted from
// fuzzed fields reads back exactly.
func FuzzCSVReader(f *testing.F) {
	f.Add([]byte("1,2,3\n4,5,6\n"), int64(10), uint64(7), int64(4096))
	f.Add([]byte("\"a\"\"b\",2\n"), int64(-1), uint64(0), int64(0))
	f.Add([]byte("1,\"2\n"), int64(1<<40), uint64(1<<63), int64(1<<62))
	// Records over the 64 KiB limit: an unterminated quoted field, one that
	// spans lines, and a long unquoted line.
	f.Add(append([]byte("1,2,3\n4,\""), bytes.Repeat([]byte("a"), maxLineBytes+1)...), int64(0), uint64(0), int64(0))
	f.Add(append([]byte("1,2,3\n4,\""), bytes.Repeat([]byte("ab\n"), maxLineBytes/3+1)...), int64(0), uint64(0), int64(0))
	f.Add(append(bytes.Repeat([]byte("5"), maxLineBytes+1), ",1,1\n"...), int64(0), uint64(0), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, tm int64, id uint64, size int64) {
		r, err := NewCSVReader(bytes.NewReader(data), CSVConfig{TimeColumn: 1, IDColumn: 2, SizeColumn: 3})
		if err != nil {
			t.Fatal(err)
		}
		reqs, err := Load(r)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		for i, q := range reqs {
			if q.Size < 0 {
				t.Fatalf("request %d has negative size %d", i, q.Size)
			}
		}

		if size < 0 {
			size = -size
			if size < 0 {
				size = 0
			}
		}
		line := fmt.Sprintf("ts;id;size\n%d; %d ;\"%d\"\n", tm, id, size)
		r, err = NewCSVReader(strings.NewReader(line), CSVConfig{Delimiter: ';', HasHeader: true, TimeColumn: 1, IDColumn: 2, SizeColumn: 3})
		if err != nil {
			t.Fatal(err)
		}
		reqs, err = Load(r)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		want := Request{Time: tm, ID: id, Size: size, NextAccess: -1}
		if len(reqs) != 1 || reqs[0] != want {
			t.Fatalf("%q: got %+v want %+v", line, reqs, want)
		}
	})
}

// FuzzCSVRecordLimit checks the record limiter against encoding/csv itself:
// the same input is parsed with and without the limiter (with a small
// limit from 1 to 256, a one-byte or a three-byte delimiter, and the input
// handed over a few bytes per Read so that records straddle reads; at limit 0
// the two would differ over a lone '\r' at the end of the input, which
// encoding/csv takes for an empty line and the limiter counts as a byte,
// and no real limit is 0). Each record's length is
// measured independently, from encoding/csv's field position and input
// offset. Records within the limit must come out identical; the first
// record over it must be an ErrMalformed error; an input encoding/csv
// rejects must be rejected too.
func FuzzCSVRecordLimit(f *testing.F) {
	for _, s := range []string{
		"a,b\nc,d\n", "\"a\nb\",c\n\n\nd\n", "a,\"b\"\"c\"\r\ne", "\"unterminated\nx\ny",
		"a；\"b\nc\nd\"；e\n", "a\xef\xbc\"b\n", "\"a\"x\n", "a\"b\n", "\r\n\r\n,\n", "\"\"\"\"\n\"", "\r", "a\r",
	} {
		f.Add([]byte(s), uint8(4), false, uint8(255))
		f.Add([]byte(s), uint8(4), true, uint8(255))
		f.Add([]byte(s), uint8(2), false, uint8(0))
		f.Add([]byte(s), uint8(2), true, uint8(1))
	}
	// A cut inside a three-byte delimiter after a closing quote.
	f.Add([]byte("；\"00000\"；"), uint8(11), true, uint8(255))
	f.Add([]byte("；\"00000\"；"), uint8(12), true, uint8(255))
	f.Add([]byte("；\"00000\"；"), uint8(10), true, uint8(255))
	f.Fuzz(func(t *testing.T, data []byte, limit uint8, wide bool, chunk uint8) {
		delim := ','
		if wide {
			delim = '；' // three bytes in UTF-8
		}
		newReader := func(r io.Reader) *csv.Reader {
			c := csv.NewReader(r)
			c.Comma = delim
			c.FieldsPerRecord = -1
			return c
		}
		plain := newReader(bytes.NewReader(data))
		maxRecord := int(limit) + 1
		limited := newReader(newRecordLimiter(&chunked{data: data, size: int(chunk) + 1}, delim, maxRecord))
		lineStart := []int64{0}
		for i, b := range data {
			if b == '\n' {
				lineStart = append(lineStart, int64(i+1))
			}
		}
		for n := 0; ; n++ {
			want, werr := plain.Read()
			length := int64(-1)
			if werr == nil {
				line, col := plain.FieldPos(0)
				start := lineStart[line-1] + int64(col-1)
				end := plain.InputOffset()
				if end > start && data[end-1] == '\n' {
					end--
				}
				length = end - start
			}
			got, gerr := limited.Read()
			switch {
			case werr == io.EOF:
				if gerr != io.EOF {
					t.Fatalf("record %d: encoding/csv is done, limited reader says %q, %v", n, got, gerr)
				}
				return
			case werr != nil:
				if gerr == nil {
					t.Fatalf("record %d: encoding/csv fails (%v), limited reader returns %q", n, werr, got)
				}
				return
			case length > int64(maxRecord):
				if !errors.Is(gerr, ErrMalformed) {
					t.Fatalf("record %d of %d bytes over a %d-byte limit: got %q, %v", n, length, maxRecord, got, gerr)
				}
				return
			case gerr != nil:
				t.Fatalf("record %d of %d bytes within a %d-byte limit: %v", n, length, maxRecord, gerr)
			case fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want):
				t.Fatalf("record %d: limited reader gives %q, encoding/csv %q", n, got, want)
			}
		}
	})
}

// chunked hands out data at most size bytes per Read.
type chunked struct {
	data []byte
	size int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}
