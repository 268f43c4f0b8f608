package evictiontest

// An Option changes what [Run] checks. Options waive checks of promises
// that the kvtier policies make but the [eviction.Policy] contract does not
// require; no option waives a check of the contract itself. The zero Option
// changes nothing.
type Option struct {
	apply func(*settings)
}

// settings is what the options passed to Run add up to. The zero settings
// check everything.
type settings struct {
	// allowAllocs waives the zero-allocation part of NoAllocsSteadyState.
	allowAllocs bool
}

// newSettings applies opts, in order, to the settings that check
// everything.
func newSettings(opts []Option) settings {
	var s settings
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&s)
		}
	}
	return s
}

// AllowAllocs returns an Option for a policy that does not promise to
// allocate nothing in steady state, such as one that allocates a list node
// per Insert. The NoAllocsSteadyState check still drives the policy through
// its steady-state cycle and fails if Evict or Insert misbehave there, but
// when the cycle allocates it logs the average number of allocations and
// skips instead of failing. Every other check is unchanged.
func AllowAllocs() Option {
	return Option{apply: func(s *settings) { s.allowAllocs = true }}
}
