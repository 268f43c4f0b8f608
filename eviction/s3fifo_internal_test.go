package eviction

import (
	"testing"
	"unsafe"
)

// TestS3FIFONodeSize pins the per-key memory the type documentation
// promises: a 32-byte slab node for 8-byte keys (plus the map entry).
func TestS3FIFONodeSize(t *testing.T) {
	if got := unsafe.Sizeof(linkedNode[uint64, s3Meta]{}); got != 32 {
		t.Fatalf("S3FIFO node for uint64 keys is %d bytes, documented as 32", got)
	}
}

// TestS3FIFOQueueAccounting checks the per-queue byte counts against a walk
// of the lists after a random run with pins, removes and ghost hits.
func TestS3FIFOQueueAccounting(t *testing.T) {
	p, err := NewS3FIFO[int](S3FIFOConfig{Capacity: 200})
	if err != nil {
		t.Fatal(err)
	}
	x := uint64(12345)
	next := func(n int) int { // xorshift: no test dependency on math/rand
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
	for step := range 20000 {
		k := next(300)
		switch next(6) {
		case 0, 1:
			_ = p.Insert(k, NewEntry(int64(1+next(8))))
		case 2:
			p.Access(k)
		case 3:
			if next(2) == 0 {
				p.Pin(k)
			} else {
				p.Unpin(k)
			}
		case 4:
			if next(4) == 0 {
				p.Remove(k)
			} else {
				p.Admit(k, int64(1+next(25)))
			}
		case 5:
			p.Evict()
		}
		if step%97 != 0 {
			continue
		}
		tracked := 0
		for q := range uint8(s3Lists) {
			var bytes int64
			count := 0
			for i := p.slab.front(int32(q)); i != int32(q); i = p.slab.nodes[i].next {
				m := p.slab.nodes[i].meta
				if m.queue != q || m.pinned {
					t.Fatalf("step %d: node on list %d says queue %d pinned %v", step, q, m.queue, m.pinned)
				}
				bytes += m.size
				count++
			}
			if bytes != p.bytes[q] || count != p.count[q] {
				t.Fatalf("step %d: list %d holds %d keys, %d bytes; counters say %d, %d", step, q, count, bytes, p.count[q], p.bytes[q])
			}
			if q != s3Ghost {
				tracked += count
			}
		}
		if p.bytes[s3Ghost] > p.ghostCap {
			t.Fatalf("step %d: ghost holds %d > %d", step, p.bytes[s3Ghost], p.ghostCap)
		}
		pinned := 0
		for _, i := range p.index {
			if m := p.slab.nodes[i].meta; m.pinned {
				pinned++
			}
		}
		if tracked+pinned != p.Len() {
			t.Fatalf("step %d: %d linked + %d pinned, Len %d", step, tracked, pinned, p.Len())
		}
	}
}
