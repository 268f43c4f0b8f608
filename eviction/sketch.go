package eviction

import (
	"math/bits"
	"reflect"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// sketch estimates how often each key was seen recently, in a fixed
// amount of memory: TinyLFU's frequency filter (Einziger, Friedman and
// Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", 2017) as
// Caffeine builds it. A count-min sketch of 4-bit counters, four rows,
// sixteen counters to a word, counts the keys seen more than once; a
// doorkeeper (a Bloom filter) takes each key's first sighting, so that the
// many keys seen once take no counter. An estimate is the least of the
// key's four counters, plus one if the doorkeeper holds it. After sample
// sightings that changed the sketch (a key whose four counters are at 15
// changes nothing, as in Caffeine, so the hottest keys do not hasten the
// aging) every counter is halved and the doorkeeper cleared, so that the
// estimates follow what is popular now.
//
// A key's four counters lie in one block of 8 words (64 bytes, a cache
// line; row i in word 2i or 2i+1 of the block), as in Caffeine, and its
// three doorkeeper bits in one word, so that a sighting reads two cache
// lines, not seven.
//
// Every write goes through set or setDoor, which journal the old value
// while a transaction runs (see Transactional), and an aging saves the
// whole table and doorkeeper first.
type sketch struct {
	table     []uint64 // 16 counters of 4 bits per word
	blockBits uint     // log2(blocks of 8 words)
	door      []uint64 // doorkeeper bits
	doorMask  uint64   // doorkeeper words - 1
	additions int
	sample    int

	tx sketchJournal
}

// sketchJournal records a sketch's changes while a transaction runs.
type sketchJournal struct {
	on bool
	// writes holds (word, old value) of the table (door false) and the
	// doorkeeper, oldest first; a write with word -1 marks an aging, whose
	// saved table and doorkeeper are the next of saved.
	writes    []sketchWrite
	saved     [][]uint64 // table, door, table, door... of each aging
	spare     [][]uint64 // buffers of earlier transactions' agings, reused
	additions int
}

type sketchWrite struct {
	word int
	door bool
	old  uint64
}

// newSketch returns a sketch sized for about keys distinct keys in the
// cache: a word of counters per key (rounded up to a power of two, at
// least 16) and 8 doorkeeper bits per key; it ages first after 10 × keys
// sightings, as Caffeine does.
func newSketch(keys int) sketch {
	n := 1 << bits.Len(uint(max(keys, 16)-1))
	return sketch{
		table:     make([]uint64, n),
		blockBits: uint(bits.Len(uint(n/8 - 1))),
		door:      make([]uint64, n/8),
		doorMask:  uint64(n/8 - 1),
		sample:    10 * max(keys, 16),
	}
}

// sketchSpread derives, by a product, the bits that place a key's counters
// and doorkeeper bits in their block and word from its hash, whose top bits
// choose the block and low bits the doorkeeper's word.
const sketchSpread = 0x9ae16a3b2f90404f

// spread returns the bits of h that place its counters and doorkeeper
// bits.
func spread(h uint64) uint64 {
	x := h * sketchSpread
	return x ^ x>>29
}

// slot returns the word and the shift of h's counter in row i: in h's
// block, word 2i or 2i+1, one of its 16 counters.
func (s *sketch) slot(h uint64, i int) (int, uint) {
	x := spread(h) >> (8 * i)
	return int((h>>(64-s.blockBits))<<3 + x&1 + uint64(2*i)), uint((x>>1)&15) << 2
}

// doorBits returns the doorkeeper word of h and its three bits there.
func (s *sketch) doorBits(h uint64) (int, uint64) {
	x := spread(h)
	return int(h & s.doorMask), 1<<((x>>40)&63) | 1<<((x>>46)&63) | 1<<((x>>52)&63)
}

// estimate returns how often h was seen, as the sketch remembers it: 0 to
// 16.
func (s *sketch) estimate(h uint64) int {
	least := uint64(15)
	for i := range 4 {
		w, sh := s.slot(h, i)
		least = min(least, (s.table[w]>>sh)&15)
	}
	if s.inDoor(h) {
		least++
	}
	return int(least)
}

func (s *sketch) inDoor(h uint64) bool {
	w, b := s.doorBits(h)
	return s.door[w]&b == b
}

// increment counts one sighting of h, aging the sketch when the sample is
// full.
func (s *sketch) increment(h uint64) {
	added := false
	if w, b := s.doorBits(h); s.door[w]&b != b {
		s.setDoor(w, s.door[w]|b)
		added = true
	} else {
		for i := range 4 {
			w, sh := s.slot(h, i)
			if (s.table[w]>>sh)&15 < 15 {
				s.set(w, s.table[w]+1<<sh)
				added = true
			}
		}
	}
	if !added {
		return
	}
	s.additions++
	if s.additions >= s.sample {
		s.age()
	}
}

// age halves every counter and clears the doorkeeper.
func (s *sketch) age() {
	if s.tx.on {
		s.tx.writes = append(s.tx.writes, sketchWrite{word: -1})
		s.tx.saved = append(s.tx.saved, s.save(s.table), s.save(s.door))
	}
	for i, w := range s.table {
		s.table[i] = (w >> 1) & 0x7777777777777777
	}
	clear(s.door)
	s.additions /= 2
}

// save returns a copy of a, in a buffer an earlier aging left if one fits.
func (s *sketch) save(a []uint64) []uint64 {
	for i, b := range s.tx.spare {
		if cap(b) >= len(a) {
			last := len(s.tx.spare) - 1
			s.tx.spare[i] = s.tx.spare[last]
			s.tx.spare = s.tx.spare[:last]
			return append(b[:0], a...)
		}
	}
	return append([]uint64(nil), a...)
}

func (s *sketch) set(w int, v uint64) {
	if s.tx.on {
		s.tx.writes = append(s.tx.writes, sketchWrite{word: w, old: s.table[w]})
	}
	s.table[w] = v
}

func (s *sketch) setDoor(w int, v uint64) {
	if s.tx.on {
		s.tx.writes = append(s.tx.writes, sketchWrite{word: w, door: true, old: s.door[w]})
	}
	s.door[w] = v
}

func (s *sketch) begin() {
	s.tx.on = true
	s.tx.additions = s.additions
}

func (s *sketch) commit() {
	s.tx.on = false
	s.tx.writes = s.tx.writes[:0]
	s.tx.spare = append(s.tx.spare, s.tx.saved...)
	clear(s.tx.saved)
	s.tx.saved = s.tx.saved[:0]
}

func (s *sketch) rollback() {
	s.tx.on = false
	saved := len(s.tx.saved)
	for j := len(s.tx.writes) - 1; j >= 0; j-- {
		switch w := s.tx.writes[j]; {
		case w.word < 0:
			saved -= 2
			copy(s.table, s.tx.saved[saved])
			copy(s.door, s.tx.saved[saved+1])
		case w.door:
			s.door[w.word] = w.old
		default:
			s.table[w.word] = w.old
		}
	}
	s.additions = s.tx.additions
	s.commit()
}

// keyHasher returns a hash of K's values that is the same in every process,
// for keys whose type is an integer or a string (of any name), and nil for
// any other key type. Integers are mixed with SplitMix64's step,
// strings hashed with xxhash.
func keyHasher[K comparable]() func(K) uint64 {
	t := reflect.TypeFor[K]()
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		switch t.Size() {
		case 8:
			return func(k K) uint64 { return mixKey(*(*uint64)(unsafe.Pointer(&k))) }
		case 4:
			return func(k K) uint64 { return mixKey(uint64(*(*uint32)(unsafe.Pointer(&k)))) }
		case 2:
			return func(k K) uint64 { return mixKey(uint64(*(*uint16)(unsafe.Pointer(&k)))) }
		default:
			return func(k K) uint64 { return mixKey(uint64(*(*uint8)(unsafe.Pointer(&k)))) }
		}
	case reflect.String:
		return func(k K) uint64 { return xxhash.Sum64String(*(*string)(unsafe.Pointer(&k))) }
	}
	return nil
}

// mix64 is SplitMix64's finalizer: every bit of x moves about half the bits
// of the result.
func mixKey(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
