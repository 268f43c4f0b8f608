package trace

import (
	"bytes"
	"encoding/binary"
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
