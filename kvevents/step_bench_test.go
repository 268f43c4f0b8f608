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

// BenchmarkStep256 is one scheduling step of 256 sequences, each
// prefilling a new 16-token block (acquire, commit, release) in a cache
// whose GPU is full, so that every step also moves 256 blocks to the CPU
// and drops 256 from it. "cache" runs the step with events off;
// "cache+events" with events on ("cache+blockevents": without UnitMoved,
// Config.BlockEventsOnly), then drains them (TakeEvents),
// translates them (Translator) and publishes them as one batch to a
// subscriber on loopback. It reports the time of the cache's part and of
// the events' part per step (cache_us/step, events_us/step), the vLLM
// events and the encoded bytes per step, and, for the events' part,
// events/s and MB/s.
func BenchmarkStep256(b *testing.B) {
	const seqs, blockTokens = 256, 16
	for _, mode := range []string{"cache", "cache+events", "cache+blockevents"} {
		events := mode != "cache"
		b.Run(mode, func(b *testing.B) {
			l, err := layout.New(layout.Model{Name: "bench", Layers: 4, QueryHeads: 8, KVHeads: 2, HeadDim: 64, ElemBytes: 2}, layout.PagedLayer, blockTokens)
			if err != nil {
				b.Fatal(err)
			}
			cfg := kvcache.Config{Layout: l, Tiers: []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 4 * 2048}}, {Capacity: kvcache.Capacity{Units: 4 * 2048}}}}
			if events {
				cfg.EventBuffer = 1 << 16
				cfg.BlockEventsOnly = mode == "cache+blockevents"
			}
			c, err := kvcache.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			var (
				tr    = kvevents.NewTranslator(c)
				pub   *kvevents.Publisher
				enc   *kvevents.Encoder
				buf   []kvcache.Event
				out   []kvevents.Event
				next  uint32
				cache time.Duration
				evs   time.Duration
				nev   int
				bytes int
			)
			if events {
				pub, enc = benchPublisher(b)
			}
			tokens := make([]uint32, blockTokens)
			step := func() {
				t0 := time.Now()
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
				t1 := time.Now()
				cache += t1.Sub(t0)
				if !events {
					return
				}
				buf, _, err = c.TakeEvents(buf[:0])
				if err != nil {
					b.Fatal(err)
				}
				out = tr.Append(out[:0], buf)
				if _, err := pub.Publish(kvevents.Batch{Timestamp: 1.7e9, Events: out}); err != nil {
					b.Fatal(err)
				}
				evs += time.Since(t1)
				nev += len(out)
			}
			// Fill both tiers so that every step evicts.
			for range 4 * 2048 * 2 / (4 * seqs) {
				step()
			}
			cache, evs, nev = 0, 0, 0
			if events {
				p, err := enc.Encode(kvevents.Batch{Timestamp: 1.7e9, Events: out})
				if err != nil {
					b.Fatal(err)
				}
				bytes = len(p)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			n := float64(b.N)
			b.ReportMetric(float64(cache.Microseconds())/n, "cache_us/step")
			if events {
				b.ReportMetric(float64(evs.Microseconds())/n, "events_us/step")
				b.ReportMetric(float64(nev)/n, "vllm_events/step")
				b.ReportMetric(float64(bytes)/1024, "wire_KB/step")
				b.ReportMetric(float64(nev)/evs.Seconds(), "events/s")
				b.ReportMetric(float64(bytes)*n/evs.Seconds()/1e6, "MB/s")
			}
		})
	}
}

// BenchmarkDecodeStep256 is one decode step of 256 running sequences:
// each appends one token (Append, which commits the token before it), so
// that about 16 of them fill a 16-token block per step, in a cache whose
// GPU is full of the blocks of finished sequences, so that new blocks
// evict old ones to the CPU, which drops its own. A sequence that
// reaches 512 tokens is released and a new one, with a 1-block prompt,
// takes its place. The modes and metrics are BenchmarkStep256's.
func BenchmarkDecodeStep256(b *testing.B) {
	const seqs, blockTokens, maxLen = 256, 16, 512
	for _, mode := range []string{"cache", "cache+blockevents"} {
		events := mode != "cache"
		b.Run(mode, func(b *testing.B) {
			l, err := layout.New(layout.Model{Name: "bench", Layers: 4, QueryHeads: 8, KVHeads: 2, HeadDim: 64, ElemBytes: 2}, layout.PagedLayer, blockTokens)
			if err != nil {
				b.Fatal(err)
			}
			gpu := int64(seqs * (maxLen/blockTokens + 2) * 4 * 5 / 4)
			cfg := kvcache.Config{Layout: l, Tiers: []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: gpu}}, {Capacity: kvcache.Capacity{Units: gpu / 2}}}}
			if events {
				cfg.EventBuffer, cfg.BlockEventsOnly = 1<<16, true
			}
			c, err := kvcache.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			var (
				tr    = kvevents.NewTranslator(c)
				pub   *kvevents.Publisher
				enc   *kvevents.Encoder
				buf   []kvcache.Event
				out   []kvevents.Event
				next  uint32
				cache time.Duration
				evs   time.Duration
				nev   int
				bytes int
				ids   = make([]kvcache.SeqID, seqs)
				lens  = make([]int, seqs)

				sampled, samples int
			)
			if events {
				pub, enc = benchPublisher(b)
			}
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
			step := func() {
				t0 := time.Now()
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
				t1 := time.Now()
				cache += t1.Sub(t0)
				if !events {
					return
				}
				buf, _, err = c.TakeEvents(buf[:0])
				if err != nil {
					b.Fatal(err)
				}
				out = tr.Append(out[:0], buf)
				if _, err := pub.Publish(kvevents.Batch{Timestamp: 1.7e9, Events: out}); err != nil {
					b.Fatal(err)
				}
				evs += time.Since(t1)
				nev += len(out)
				if sampled++; sampled%32 == 0 { // the wire size, on a sample of the steps
					b.StopTimer()
					if p, err := enc.Encode(kvevents.Batch{Timestamp: 1.7e9, Events: out}); err == nil {
						bytes += len(p)
						samples++
					}
					b.StartTimer()
				}
			}
			// Until the tiers are full and every step evicts.
			for range 3 * maxLen {
				step()
			}
			cache, evs, nev, bytes, samples = 0, 0, 0, 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			n := float64(b.N)
			b.ReportMetric(float64(cache.Microseconds())/n, "cache_us/step")
			if events {
				b.ReportMetric(float64(evs.Microseconds())/n, "events_us/step")
				b.ReportMetric(float64(nev)/n, "vllm_events/step")
				if samples > 0 {
					b.ReportMetric(float64(bytes)/float64(samples)/1024, "wire_KB/step")
				}
			}
			st := c.Stats()
			b.ReportMetric(float64(st.Tier(kvcache.CPU).MovedIn)/float64(st.Stored), "cpu_units_in/stored_block")
		})
	}
}
