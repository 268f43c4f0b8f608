package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/radix"
)

// Clear forgets every cached block (an AllCleared event), like vLLM's prefix
// cache reset. It needs an idle cache: it returns an error wrapping ErrBusy
// while sequences are live or transfers are in flight.
func (c *Cache) Clear() (err error) {
	if err := c.lock("Clear"); err != nil {
		return err
	}
	defer c.unlock(&err)
	if c.poisoned != nil {
		return c.poisoned
	}
	if len(c.seqs) > 0 {
		return fmt.Errorf("%w: %d sequences", ErrBusy, len(c.seqs))
	}
	if c.long > 0 {
		return fmt.Errorf("%w: %d long operations under way", ErrBusy, c.long)
	}
	if c.xfer.inFlight > 0 {
		return fmt.Errorf("%w: %d transfers in flight; Poll once the engine has finished them", ErrBusy, c.xfer.inFlight)
	}
	for b := range c.units.records() {
		if !c.units.blk(b).live {
			continue
		}
		for sl := range c.geom.slices {
			c.freeUnit(c.units.id(int32(b), sl))
		}
	}
	c.st.removed += uint64(c.tree.Clear(func(n *radix.Node[int32]) {
		c.meta.unmarkHollow(&c.units, n.Value)
		c.forgetRecord(n.Value)
	}))
	if c.events.enabled() {
		c.events.emit(Event{Kind: AllCleared})
		clear(c.events.media)
	}
	return nil
}
