package kvevents_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/kvtier/kvtier/layout"
)

// benchPublisher returns a Publisher on loopback with a subscriber that
// drains it, and an encoder of the same options.
func benchPublisher(b *testing.B) (*kvevents.Publisher, *kvevents.Encoder) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	pub, err := kvevents.NewPublisher(ctx, kvevents.Options{Endpoint: "tcp://127.0.0.1:0", HWM: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	sub := zmq4.NewSub(ctx)
	b.Cleanup(func() { _ = sub.Close() })
	if err := sub.Dial(pub.Addr()); err != nil {
		b.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		b.Fatal(err)
	}
	go func() { // drain
		for {
			if _, err := sub.Recv(); err != nil {
				return
			}
		}
	}()
	enc, err := kvevents.NewEncoder(kvevents.EncoderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return pub, enc
}

// stepBench runs a benchmark's scheduling steps on a cache, with the
// events of each step drained, translated and published as one batch,
// or with events off (mode "cache"), and reports per step the time of
// the cache's part and of the events' part.
type stepBench struct {
	b      *testing.B
	c      *kvcache.Cache
	events bool
	tr     *kvevents.Translator
	pub    *kvevents.Publisher
	enc    *kvevents.Encoder
	buf    []kvcache.Event
	out    []kvevents.Event

	cache, evs     time.Duration
	nev, steps     int
	bytes, samples int // the wire size, on a sample of the steps
}

// newStepBench returns a stepBench over a cache of 4 layers, 16-token
// blocks and the given tier capacities in units. Mode "cache" has events
// off; "cache+events" on; "cache+blockevents" on without UnitMoved
// (Config.BlockEventsOnly).
func newStepBench(b *testing.B, mode string, units ...int64) *stepBench {
	l, err := layout.New(layout.Model{Name: "bench", Layers: 4, QueryHeads: 8, KVHeads: 2, HeadDim: 64, ElemBytes: 2}, layout.PagedLayer, 16)
	if err != nil {
		b.Fatal(err)
	}
	cfg := kvcache.Config{Layout: l}
	for _, u := range units {
		cfg.Tiers = append(cfg.Tiers, kvcache.TierConfig{Capacity: kvcache.Capacity{Units: u}})
	}
	s := &stepBench{b: b, events: mode != "cache"}
	if s.events {
		cfg.EventBuffer, cfg.BlockEventsOnly = 1<<16, mode == "cache+blockevents"
	}
	if s.c, err = kvcache.New(cfg); err != nil {
		b.Fatal(err)
	}
	if s.events {
		s.tr = kvevents.NewTranslator(s.c)
		s.pub, s.enc = benchPublisher(b)
	}
	return s
}

// step runs work (the cache's part of a step), then publishes the
// step's events.
func (s *stepBench) step(work func()) {
	t0 := time.Now()
	work()
	t1 := time.Now()
	s.cache += t1.Sub(t0)
	s.steps++
	if !s.events {
		return
	}
	var err error
	if s.buf, _, err = s.c.TakeEvents(s.buf[:0]); err != nil {
		s.b.Fatal(err)
	}
	s.out = s.tr.Append(s.out[:0], s.buf)
	if _, err := s.pub.Publish(kvevents.Batch{Timestamp: 1.7e9, Events: s.out}); err != nil {
		s.b.Fatal(err)
	}
	s.evs += time.Since(t1)
	s.nev += len(s.out)
	if s.steps%32 == 0 {
		s.b.StopTimer()
		if p, err := s.enc.Encode(kvevents.Batch{Timestamp: 1.7e9, Events: s.out}); err == nil {
			s.bytes += len(p)
			s.samples++
		}
		s.b.StartTimer()
	}
}

// measure runs warm steps, then the benchmark's loop, and reports.
func (s *stepBench) measure(warm int, step func()) {
	for range warm {
		step()
	}
	s.cache, s.evs, s.nev, s.steps, s.bytes, s.samples = 0, 0, 0, 0, 0, 0
	s.b.ReportAllocs()
	s.b.ResetTimer()
	for s.b.Loop() {
		step()
	}
	n := float64(s.b.N)
	s.b.ReportMetric(float64(s.cache.Microseconds())/n, "cache_us/step")
	if !s.events {
		return
	}
	s.b.ReportMetric(float64(s.evs.Microseconds())/n, "events_us/step")
	s.b.ReportMetric(float64(s.nev)/n, "vllm_events/step")
	s.b.ReportMetric(float64(s.nev)/s.evs.Seconds(), "events/s")
	if s.samples > 0 {
		perStep := float64(s.bytes) / float64(s.samples)
		s.b.ReportMetric(perStep/1024, "wire_KiB/step")
		s.b.ReportMetric(perStep*n/s.evs.Seconds()/1e6, "MB/s")
	}
}

// BenchmarkStep256 is one scheduling step of 256 sequences, each
// prefilling a new 16-token block (acquire, commit, release) in a cache
// whose GPU is full, so that every step also moves 256 blocks to the CPU
// and drops 256 from it. "cache" runs the step with events off;
// "cache+events" with events on ("cache+blockevents": without UnitMoved,
// Config.BlockEventsOnly), then drains them (TakeEvents), translates them
// (Translator) and publishes them as one batch to a subscriber on
// loopback. It reports the time of the cache's part and of the events'
// part per step (cache_us/step, events_us/step), the vLLM events and the
// encoded bytes per step, and, for the events' part, events/s and MB/s.
func BenchmarkStep256(b *testing.B) {
	const seqs, blockTokens, units = 256, 16, 4 * 2048
	for _, mode := range []string{"cache", "cache+events", "cache+blockevents"} {
		b.Run(mode, func(b *testing.B) {
			s := newStepBench(b, mode, units, units)
			c := s.c
			tokens := make([]uint32, blockTokens)
			var next uint32
			prefill := func() {
				for range seqs {
					for i := range tokens {
						tokens[i] = next
						next++
					}
					plan, err := c.Acquire(kvcache.Request{Tokens: tokens})
					if err != nil {
						b.Fatal(err)
					}
					if err := c.Commit(plan.Seq, blockTokens); err != nil {
						b.Fatal(err)
					}
					if err := c.Release(plan.Seq); err != nil {
						b.Fatal(err)
					}
				}
			}
			// Fill both tiers so that every step evicts.
			s.measure(2*units/(4*seqs), func() { s.step(prefill) })
		})
	}
}

// BenchmarkDecodeStep256 is one decode step of 256 running sequences:
// each appends one token (Append, which commits the token before it), so
// that about 16 of them fill a 16-token block per step, in a cache whose
// GPU is full of the blocks of finished sequences, so that new blocks
// evict old ones to the CPU, which drops its own. A sequence that
// reaches 512 tokens is released and a new one, with a 1-block prompt,
// takes its place. The modes and metrics are BenchmarkStep256's, and
// cpu_units_in/stored_block the units moved to the CPU per block stored.
func BenchmarkDecodeStep256(b *testing.B) {
	const seqs, blockTokens, maxLen = 256, 16, 512
	for _, mode := range []string{"cache", "cache+blockevents"} {
		b.Run(mode, func(b *testing.B) {
			gpu := int64(seqs * (maxLen/blockTokens + 2) * 4 * 5 / 4)
			s := newStepBench(b, mode, gpu, gpu/2)
			c := s.c
			var (
				next uint32
				ids  = make([]kvcache.SeqID, seqs)
				lens = make([]int, seqs)
			)
			start := func(i, n int) {
				prompt := make([]uint32, n)
				for j := range prompt {
					prompt[j] = next
					next++
				}
				plan, err := c.Acquire(kvcache.Request{Tokens: prompt})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Commit(plan.Seq, n); err != nil {
					b.Fatal(err)
				}
				ids[i], lens[i] = plan.Seq, n
			}
			for i := range seqs {
				start(i, blockTokens+i%blockTokens) // staggered: blocks fill on different steps
			}
			decode := func() {
				for i := range seqs {
					if lens[i] >= maxLen {
						if err := c.Release(ids[i]); err != nil {
							b.Fatal(err)
						}
						start(i, blockTokens)
						continue
					}
					if _, err := c.Append(ids[i], next); err != nil {
						b.Fatal(err)
					}
					next++
					lens[i]++
				}
			}
			// Until the tiers are full and every step evicts.
			s.measure(3*maxLen, func() { s.step(decode) })
			st := c.Stats()
			b.ReportMetric(float64(st.Tier(kvcache.CPU).MovedIn)/float64(st.Stored), "cpu_units_in/stored_block")
		})
	}
}
