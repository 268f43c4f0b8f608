package kvcache

// Copy is one unit copy between two slots of the same pool: from slot
// FromSlot of tier From to slot ToSlot of tier To. A copy from a tier to the
// next one down is an offload (a victim moving down), from a lower tier to
// the GPU an onboard or a copy-on-write copy, from the GPU to the GPU a
// copy-on-write copy.
type Copy struct {
	Pool     int
	From     Tier
	FromSlot int32
	To       Tier
	ToSlot   int32
}

// Mover executes the copies the cache plans. The server supplies one over
// its device memory (for example cudaMemcpyAsync on one stream); MemoryStore
// is one over Go byte slices.
//
// Contract:
//   - Copy performs the batch in order, or as if in order: a later copy may
//     overwrite a slot an earlier copy of the same batch read (a victim's
//     slot is reused after its offload). Copies may complete asynchronously
//     as long as every later use of the slots (the next batch, a kernel)
//     is ordered after them, as on a single CUDA stream.
//   - Copy is all or nothing: when it returns an error it must have written
//     no destination slot (validate before copying). The cache then rolls
//     the operation back and the sources, which it still considers valid,
//     must be intact.
//   - The cache calls Copy with its lock held and never concurrently; the
//     batch slice is only valid during the call. Copy may call Stats and
//     the configuration getters of the cache; any other method returns
//     ErrReentrant. It must not wait for another goroutine that calls the
//     cache: that goroutine waits for the lock Copy's caller holds, and
//     the cache cannot see the cycle.
//   - A panic is recovered and fails the operation with ErrCopyFailed (see
//     there): since the batch's writes are then unknown, the units left in
//     its destination slots after the rollback are dropped, and a sequence
//     that pins one of them (the operation's own, which had released it in
//     the same call) is ended.
type Mover interface {
	Copy(batch []Copy) error
}
