package trace_test

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/kvtier/kvtier/eviction/trace"
)

func ExampleNewCSVReader() {
	in := "time,key,bytes\n" +
		"10,7,4096\n" +
		"11,8,512\n"
	r, err := trace.NewCSVReader(strings.NewReader(in), trace.CSVConfig{
		HasHeader: true, TimeColumn: 1, IDColumn: 2, SizeColumn: 3,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var q trace.Request
	for r.Next(&q) == nil {
		fmt.Printf("t=%d id=%d size=%d\n", q.Time, q.ID, q.Size)
	}
	// Output:
	// t=10 id=7 size=4096
	// t=11 id=8 size=512
}

func ExampleNewOracleGeneralWriter() {
	var buf bytes.Buffer
	w := trace.NewOracleGeneralWriter(&buf)
	_ = w.Write(trace.Request{Time: 1, ID: 42, Size: 4096, NextAccess: 2})
	_ = w.Write(trace.Request{Time: 2, ID: 42, Size: 4096, NextAccess: -1})
	_ = w.Flush()
	fmt.Println(buf.Len(), "bytes")

	reqs, err := trace.Load(trace.NewOracleGeneralReader(&buf))
	fmt.Println(len(reqs), "requests", err)
	fmt.Printf("%+v\n", reqs[0])
	// Output:
	// 48 bytes
	// 2 requests <nil>
	// {Time:1 ID:42 Size:4096 NextAccess:2}
}

func ExampleNewTextReader() {
	r := trace.NewTextReader(strings.NewReader("5\n6\n5\nnot-a-number\n"), trace.TextConfig{})
	var q trace.Request
	for {
		if err := r.Next(&q); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(q.ID)
	}
	// Output:
	// 5
	// 6
	// 5
	// trace: malformed record: line 4: id "not-a-number" is not a decimal uint64
}
