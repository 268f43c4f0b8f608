package kvcache

import (
	"fmt"
	"slices"
)

// CopyErrors reports which copies of a batch failed: element i is the
// error of the batch's i-th copy, nil for one that completed. A
// TransferEngine reports a transfer in which only some copies failed by
// calling done with a CopyErrors as long as the transfer, so that the
// cache keeps what the other copies moved instead of recomputing the whole
// transfer (one unit a shared store evicted then costs one recompute). The
// tierstore stores return one from Get when units of a batch of several
// are missing or corrupt.
//
// errors.Is and errors.As see every non-nil element. The cache and
// tierstore.Engine find a CopyErrors wrapped in another error too
// (errors.As); one of another length than its batch fails the whole batch.
type CopyErrors []error

// Error summarizes the failures: how many, and the first.
func (e CopyErrors) Error() string {
	n := e.Failed()
	if n == 0 {
		return fmt.Sprintf("kvcache: none of %d copies failed", len(e))
	}
	first := e[slices.IndexFunc(e, func(err error) bool { return err != nil })]
	return fmt.Sprintf("kvcache: %d of %d copies failed, the first: %v", n, len(e), first)
}

// Failed returns how many copies failed (the non-nil elements).
func (e CopyErrors) Failed() int {
	n := 0
	for _, err := range e {
		if err != nil {
			n++
		}
	}
	return n
}

// Unwrap returns the non-nil elements.
func (e CopyErrors) Unwrap() []error {
	var errs []error
	for _, err := range e {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Err returns nil when no copy failed, the error of the only copy of a
// batch of one, and e otherwise: what a batch call returns.
func (e CopyErrors) Err() error {
	switch {
	case e.Failed() == 0:
		return nil
	case len(e) == 1:
		return e[0]
	}
	return e
}

// Set records err as the error of copy i of a batch of n copies and
// returns e, which it makes (n long) when e is nil. It lets a loop build
// a CopyErrors only when something fails:
//
//	var errs kvcache.CopyErrors
//	for i := range keys {
//		if err := get(i); err != nil {
//			errs = errs.Set(i, len(keys), err)
//		}
//	}
//	return errs.Err()
func (e CopyErrors) Set(i, n int, err error) CopyErrors {
	if e == nil {
		e = make(CopyErrors, n)
	}
	e[i] = err
	return e
}

// slotKey names a slot for copyFailures.
type slotKey struct {
	tier Tier
	pool int
	slot int32
}

// copyFailures returns the error of each of copies, given ce, the
// engine's report of them (as long as copies). A copy that read a slot an
// earlier failed copy of the same transfer was to write fails too,
// whatever the engine says of it: its source never got the bytes. The
// planner puts such reads (a copy-on-write of a unit being loaded, a load
// of a victim moving down) in transfers of their own that depend on the
// writer, so today this is a guard that the model tests never see fire;
// it keeps the rule local should that change.
func copyFailures(copies []Copy, ce CopyErrors) []error {
	errs := make([]error, len(copies))
	var bad map[slotKey]error
	for i, cp := range copies {
		e := ce[i]
		if e == nil {
			if src, ok := bad[slotKey{cp.From, cp.Pool, cp.FromSlot}]; ok {
				e = fmt.Errorf("%w: copy %d read tier %d pool %d slot %d, which a failed copy was to write: %w", ErrCopyFailed, i, cp.From, cp.Pool, cp.FromSlot, src)
			}
		}
		dst := slotKey{cp.To, cp.Pool, cp.ToSlot}
		if e != nil {
			if bad == nil {
				bad = make(map[slotKey]error)
			}
			bad[dst] = e
		} else {
			delete(bad, dst)
		}
		errs[i] = e
	}
	return errs
}
