package eviction

// interfaceMapIndex is a Go map behind the Index interface, for the
// benchmark that measures what the interface call costs against the map
// the policies use directly (BenchmarkPolicy's "map-via-Index" variants).
type interfaceMapIndex[K comparable] struct {
	m       map[K]int32
	claimed bool
}

// NewInterfaceMapIndex returns an empty interfaceMapIndex.
func NewInterfaceMapIndex[K comparable]() Index[K] {
	return &interfaceMapIndex[K]{m: make(map[K]int32)}
}

func (x *interfaceMapIndex[K]) lookup(k K) (int32, bool) {
	i, ok := x.m[k]
	return i, ok
}

func (x *interfaceMapIndex[K]) store(k K, i int32) error {
	x.m[k] = i
	return nil
}

func (x *interfaceMapIndex[K]) delete(k K) { delete(x.m, k) }
func (x *interfaceMapIndex[K]) len() int   { return len(x.m) }

func (x *interfaceMapIndex[K]) claim() error {
	x.claimed = true
	return nil
}
