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
// of the lists after a random run with pins, removes and ghost hits, and
// that the index holds exactly the tracked, ghost and claimed keys; with the
// map and with a DenseIndex.
func TestS3FIFOQueueAccounting(t *testing.T) {
	dense, err := NewDenseIndex(299)
	if err != nil {
		t.Fatal(err)
	}
	for _, idx := range []Index[int]{nil, dense} {
		p, err := NewS3FIFOWithIndex(S3FIFOConfig{Capacity: 200}, idx)
		if err != nil {
			t.Fatal(err)
		}
		checkS3FIFOAccounting(t, p)
	}
}

func checkS3FIFOAccounting(t *testing.T, p *S3FIFO[int]) {
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
			for i := p.slab.front(int32(q)); i != int32(q); i = p.slab.nodes.at(i).next {
				m := p.slab.nodes.at(i).meta
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
		pinned, indexed := 0, 0
		for k := range 300 {
			i, ok := p.keys.lookup(k)
			if !ok {
				continue
			}
			indexed++
			if n := (*p.slab.nodes.at(i)); n.key != k {
				t.Fatalf("step %d: the index sends key %d to node %d, which holds key %d", step, k, i, n.key)
			} else if n.meta.pinned {
				pinned++
			}
		}
		if tracked+pinned != p.Len() {
			t.Fatalf("step %d: %d linked + %d pinned, Len %d", step, tracked, pinned, p.Len())
		}
		claimed := 0
		if p.claimed != noLink {
			claimed = 1
		}
		if want := tracked + pinned + p.count[s3Ghost] + claimed; indexed != want || p.keys.len() != want {
			t.Fatalf("step %d: the index holds %d keys (len %d); tracked, ghost and claimed keys: %d", step, indexed, p.keys.len(), want)
		}
	}
}

// TestS3FIFOForget checks Forget of a ghost key: its entry leaves the
// ghost (and the index), so that the key, inserted again, is a new key (in
// small, not main); a rollback brings the entry back; Forget of a tracked
// key changes nothing.
func TestS3FIFOForget(t *testing.T) {
	p, err := NewS3FIFO[int](S3FIFOConfig{Capacity: 100})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEntry(1)
	// Fill (0 to 9 in small, the rest in main), then evict 0 from small
	// into the ghost and insert 100 in its place.
	for k := range 100 {
		if err := p.Insert(k, e); err != nil {
			t.Fatal(err)
		}
	}
	ghost, ok := p.Evict()
	if !ok {
		t.Fatal("no victim")
	}
	if i, ok := p.keys.lookup(ghost); !ok || p.slab.nodes.at(i).meta.queue != s3Ghost {
		t.Fatalf("victim %d is not in the ghost", ghost)
	}
	if err := p.Insert(100, e); err != nil {
		t.Fatal(err)
	}
	queueOf := func(k int) (uint8, bool) {
		i, ok := p.keys.lookup(k)
		if !ok {
			return 0, false
		}
		return p.slab.nodes.at(i).meta.queue, true
	}
	ghosts := p.count[s3Ghost]
	p.Begin()
	p.Forget(ghost)
	if _, ok := queueOf(ghost); ok || p.count[s3Ghost] != ghosts-1 {
		t.Fatalf("after Forget, key %d is still known or the ghost holds %d entries (was %d)", ghost, p.count[s3Ghost], ghosts)
	}
	p.Rollback()
	if q, ok := queueOf(ghost); !ok || q != s3Ghost || p.count[s3Ghost] != ghosts {
		t.Fatalf("after Rollback, key %d is not a ghost again (queue %d, known %v)", ghost, q, ok)
	}
	p.Forget(ghost)
	tracked := 100
	if p.Len() != tracked {
		t.Fatalf("Len %d, want %d", p.Len(), tracked)
	}
	p.Forget(100) // tracked: nothing happens
	if q, ok := queueOf(100); !ok || q > s3Main || p.Len() != tracked {
		t.Fatalf("Forget of tracked key 100 changed it (queue %d, known %v, Len %d)", q, ok, p.Len())
	}
	if _, ok := p.Evict(); !ok {
		t.Fatal("no victim")
	}
	if err := p.Insert(ghost, e); err != nil {
		t.Fatal(err)
	}
	if q, _ := queueOf(ghost); q != s3Small {
		t.Fatalf("key %d, forgotten, went to queue %d on its next Insert, want small (%d)", ghost, q, s3Small)
	}
}
