// Package costmodel estimates what it costs to lose a KV-cache unit, so that
// eviction can prefer victims that are cheap to get back.
//
// Two costs are modelled:
//
//   - Recompute cost: the seconds a prefill needs to rebuild a unit. Following
//     Pensieve (Yu et al., "Stateful Large Language Model Serving with
//     Pensieve", EuroSys 2025), the attention part grows linearly with the
//     context the recomputed chunk attends to, so the base cost of a chunk is
//     alpha*contextTokens + beta + nonAttention. Pensieve also contributes the
//     retention value, cost divided by the time the unit has been inactive:
//     the lower it is, the better the unit is to evict.
//   - Transfer cost: the seconds to copy a unit's bytes over a link (for
//     example PCIe from CPU memory back to the GPU): bytes/bandwidth + latency.
//
// Two multiplicative weights refine the base cost. They do NOT come from the
// Pensieve paper; they come from kvtier's seed design and are defaults that
// can be replaced or switched off:
//
//   - the layer weight (L-layer)/L, which values early layers more, and
//   - the position weight (chunk+1)/chunks, which values late chunks more
//     (a late chunk attends to more context).
//
// Setting both to [Flat] gives plain Pensieve.
//
// Costs are float64 seconds, finite and non-negative whenever the error is
// nil (the one infinity is the documented retention value of a unit used
// this instant). Every function here is pure and safe for concurrent use as
// long as the weight functions it is given are; the types are plain values.
// Bad input (a negative, NaN or infinite coefficient, a weight function that
// returns such a weight, a cost that overflows float64, a unit out of
// range, a negative inactivity, too few samples to fit) returns an error
// wrapping one of the package's sentinels ([ErrInvalidParameter],
// [ErrInvalidUnit], [ErrNegativeDuration], [ErrTooFewSamples]). Nothing here
// panics of its own; a panic raised by a weight function is returned as an
// error by [Recompute.Validate] and passed through by [Recompute.Cost].
package costmodel
