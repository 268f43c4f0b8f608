package tierstore

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// Fingerprint names a deployment: the model (an identity the caller
// chooses, such as the weights' name and revision), the cache's layout and
// its hash seed (kvcache.Config.HashSeed). Stores put it in every key and
// header, so deployments whose units differ in meaning or size never read
// each other's values even when they share a Redis.
func Fingerprint(model string, l *layout.Layout, hashSeed uint64) uint64 {
	m := l.Model()
	desc := fmt.Sprintf("kvtier/1|%q|%+v|kind=%d|tokensPerUnit=%d|units=%d|blockBytes=%d|pools=%+v|seed=%d",
		model, m, l.Kind(), l.TokensPerUnit(), l.UnitsPerBlock(), l.BlockBytes(), l.Pools(), hashSeed)
	return xxhash.Sum64String(desc)
}

// magic starts every value (format version 1).
var magic = [4]byte{'K', 'V', 'T', '1'}

const (
	flagShared    = 1 << 0
	flagHasParent = 1 << 1
)

// Name returns the name under which a store keeps unit k of the
// deployment fp: the fingerprint, the namespace and the LoRA (hex, "-" for
// empty, a hash when longer than 64 bytes) and the block hash with the
// slice, separated by sep. Deployments and tenants never share a name (but
// for tenants with namespaces over 64 bytes whose 64-bit hashes collide,
// whose values the header keeps apart).
func Name(fp uint64, k kvcache.UnitKey, sep byte) string {
	b := make([]byte, 0, 64+2*len(k.Keys.Namespace)+2*len(k.Keys.LoRA))
	b = appendHex64(b, fp)
	b = append(b, sep)
	b = appendHexString(b, k.Keys.Namespace)
	b = append(b, sep)
	b = appendHexString(b, k.Keys.LoRA)
	b = append(b, sep)
	b = appendHex64(b, k.Hash)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(k.Slice), 10)
	return string(b)
}

func appendHex64(b []byte, v uint64) []byte {
	var x [8]byte
	binary.BigEndian.PutUint64(x[:], v)
	return hex.AppendEncode(b, x[:])
}

// maxHexPart is the longest namespace or LoRA Name spells out in hex; a
// longer one is named by its hash ('h' and 16 hex digits), so that a name
// stays a valid file name (255 bytes). Two long parts with equal hashes
// share a name, never a value: the header names them in full.
const maxHexPart = 64

func appendHexString(b []byte, s string) []byte {
	switch {
	case s == "":
		return append(b, '-')
	case len(s) > maxHexPart:
		return appendHex64(append(b, 'h'), xxhash.Sum64String(s))
	}
	return hex.AppendEncode(b, []byte(s))
}

// Encode appends to dst the value a store keeps for unit k of deployment
// fp holding payload: a header naming the unit, the payload, and an
// xxhash64 of everything before it.
func Encode(dst []byte, fp uint64, k kvcache.UnitKey, payload []byte) []byte {
	dst = slices.Grow(dst, HeaderSize(k)+len(payload)+8)
	start := len(dst)
	dst = appendHeader(dst, fp, k)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(payload)))
	dst = append(dst, payload...)
	return binary.LittleEndian.AppendUint64(dst, xxhash.Sum64(dst[start:]))
}

// HeaderSize returns how many bytes Encode puts before the payload of k.
func HeaderSize(k kvcache.UnitKey) int {
	return len(magic) + 8 + 1 + 8*3 + 4*2 + 4 + len(k.Keys.Namespace) + 4 + len(k.Keys.LoRA) +
		4 + 4*len(k.Tokens) + 4 + 16*len(k.Extra) + 8
}

func appendHeader(b []byte, fp uint64, k kvcache.UnitKey) []byte {
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint64(b, fp)
	var flags byte
	if k.Shared {
		flags |= flagShared
	}
	if k.HasParent {
		flags |= flagHasParent
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, k.Hash)
	b = binary.LittleEndian.AppendUint64(b, k.Parent)
	var unit uint64
	if !k.Shared {
		// A private unit is named by its id in the cache that wrote it;
		// a shared one by its content alone.
		unit = uint64(k.Unit)
	}
	b = binary.LittleEndian.AppendUint64(b, unit)
	b = binary.LittleEndian.AppendUint32(b, uint32(k.Depth))
	b = binary.LittleEndian.AppendUint32(b, uint32(k.Slice))
	b = appendString(b, k.Keys.Namespace)
	b = appendString(b, k.Keys.LoRA)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(k.Tokens)))
	for _, t := range k.Tokens {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(k.Extra)))
	for _, x := range k.Extra {
		b = binary.LittleEndian.AppendUint64(b, uint64(x.Pos))
		b = binary.LittleEndian.AppendUint64(b, x.Value)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// Decode checks that value is what Encode wrote for unit k of deployment
// fp with a payload of len(dst) bytes, and copies the payload into dst.
// It returns an error wrapping kvcache.ErrUnitCorrupt, naming the first
// field that differs, when the checksum fails (a damaged or truncated
// value), when the header names another deployment or unit (another
// namespace, LoRA, parent, tokens or extra keys: a hash collision), or
// when the payload's size is not len(dst).
func Decode(value []byte, fp uint64, k kvcache.UnitKey, dst []byte) error {
	want := HeaderSize(k) + len(dst) + 8
	if len(value) < 8 {
		return corrupt(k, "value of %d bytes", len(value))
	}
	body := value[:len(value)-8]
	if sum := binary.LittleEndian.Uint64(value[len(value)-8:]); sum != xxhash.Sum64(body) {
		return corrupt(k, "checksum %016x does not match its %d bytes", sum, len(body))
	}
	if len(value) != want {
		return corrupt(k, "value of %d bytes, want %d", len(value), want)
	}
	n, field := matchHeader(body, fp, k)
	if field != "" {
		return corrupt(k, "header names another unit (its %s differs)", field)
	}
	if got := binary.LittleEndian.Uint64(body[n:]); got != uint64(len(dst)) {
		return corrupt(k, "payload of %d bytes, want %d", got, len(dst))
	}
	copy(dst, body[n+8:])
	return nil
}

func corrupt(k kvcache.UnitKey, format string, args ...any) error {
	return fmt.Errorf("%w: block %016x slice %d: %s", kvcache.ErrUnitCorrupt, k.Hash, k.Slice, fmt.Sprintf(format, args...))
}

// matchHeader compares the header at the start of body, whose length
// Decode checked against HeaderSize(k), with the one appendHeader writes
// for k, field by field (no copy of it is built: a header holds a whole
// block's tokens). It returns the header's length, or the first field
// that differs.
func matchHeader(body []byte, fp uint64, k kvcache.UnitKey) (int, string) {
	var flags byte
	if k.Shared {
		flags |= flagShared
	}
	if k.HasParent {
		flags |= flagHasParent
	}
	var unit uint64
	if !k.Shared {
		unit = uint64(k.Unit)
	}
	r := body
	u64 := func(v uint64) bool {
		ok := binary.LittleEndian.Uint64(r) == v
		r = r[8:]
		return ok
	}
	u32 := func(v uint32) bool {
		ok := binary.LittleEndian.Uint32(r) == v
		r = r[4:]
		return ok
	}
	str := func(s string) bool {
		if !u32(uint32(len(s))) {
			return false
		}
		ok := string(r[:len(s)]) == s
		r = r[len(s):]
		return ok
	}
	switch {
	case string(r[:4]) != string(magic[:]):
		return 0, "magic"
	case !func() bool { r = r[4:]; return u64(fp) }():
		return 0, "fingerprint"
	case r[0] != flags:
		return 0, "flags"
	case !func() bool { r = r[1:]; return u64(k.Hash) }():
		return 0, "hash"
	case !u64(k.Parent):
		return 0, "parent"
	case !u64(unit):
		return 0, "unit"
	case !u32(uint32(k.Depth)):
		return 0, "depth"
	case !u32(uint32(k.Slice)):
		return 0, "slice"
	case !str(k.Keys.Namespace):
		return 0, "namespace"
	case !str(k.Keys.LoRA):
		return 0, "LoRA"
	case !u32(uint32(len(k.Tokens))):
		return 0, "token count"
	}
	for _, t := range k.Tokens {
		if !u32(t) {
			return 0, "tokens"
		}
	}
	if !u32(uint32(len(k.Extra))) {
		return 0, "extra key count"
	}
	for _, x := range k.Extra {
		if !u64(uint64(x.Pos)) || !u64(x.Value) {
			return 0, "extra keys"
		}
	}
	return len(body) - len(r), ""
}
