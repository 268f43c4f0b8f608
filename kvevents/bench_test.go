package kvevents

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// stepBatch models one scheduler step of 256 running sequences, each of
// which filled one 16-token block.
func stepBatch() Batch {
	const seqs, blockSize = 256, 16
	evs := make([]Event, seqs)
	for s := range seqs {
		tokens := make([]uint32, blockSize)
		for i := range tokens {
			tokens[i] = uint32(1000 + s*blockSize + i)
		}
		parent := uint64(0x9e3779b97f4a7c15) * uint64(s+1)
		evs[s] = &BlockStored{
			BlockHashes:     []uint64{parent ^ 0xdeadbeefcafebabe},
			ParentBlockHash: &parent,
			TokenIDs:        tokens,
			BlockSize:       blockSize,
			Medium:          MediumGPU,
		}
	}
	return Batch{Timestamp: 1.7e9, Events: evs, DPRank: Ptr(0)}
}

func BenchmarkEncodeStep(b *testing.B) {
	batch := stepBatch()
	for _, o := range []EncoderOptions{
		{Positional, HashInt, BatchArray}, {TaggedMap, HashInt, BatchArray}, {Positional, HashBytes, BatchArray},
	} {
		name := map[Encoding]string{Positional: "positional", TaggedMap: "taggedmap"}[o.Encoding] +
			map[HashEncoding]string{HashInt: "_int", HashBytes: "_bytes"}[o.HashEncoding]
		b.Run(name, func(b *testing.B) {
			enc, err := NewEncoder(o)
			if err != nil {
				b.Fatal(err)
			}
			p, err := enc.Encode(batch)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := enc.Encode(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(batch.Events))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(len(p)), "bytes/batch")
		})
	}
}

// reflectStored is BlockStored as msgpack's Encoder writes a struct by
// reflection, positionally (UseArrayEncodedStructs): the obvious
// alternative to the Encoder's hand-written writer.
type reflectStored struct {
	Tag         string
	BlockHashes []uint64
	Parent      *uint64
	TokenIDs    []uint32
	BlockSize   int
	LoRAID      *int
	Medium      string
	LoRAName    *string
}

type reflectBatch struct {
	TS     float64
	Events []reflectStored
	DPRank int
}

func BenchmarkEncodeStepReflect(b *testing.B) {
	batch := stepBatch()
	rb := reflectBatch{TS: batch.Timestamp}
	for _, ev := range batch.Events {
		e := ev.(*BlockStored)
		rb.Events = append(rb.Events, reflectStored{Tag: TagBlockStored, BlockHashes: e.BlockHashes, Parent: e.ParentBlockHash,
			TokenIDs: e.TokenIDs, BlockSize: e.BlockSize, Medium: e.Medium})
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseArrayEncodedStructs(true)
	marshal := func() ([]byte, error) {
		buf.Reset()
		err := enc.Encode(&rb)
		return bytes.Clone(buf.Bytes()), err
	}
	p, err := marshal()
	if err != nil {
		b.Fatal(err)
	}
	// The same bytes but for integer widths: the decoded batches agree.
	got, err := Decode(p)
	if err != nil {
		b.Fatal(err)
	}
	if len(got.Events) != len(batch.Events) {
		b.Fatal("the reflective encoding lost events")
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := marshal(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(batch.Events))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(len(p)), "bytes/batch")
}
