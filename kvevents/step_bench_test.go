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
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				pub, err = kvevents.NewPublisher(ctx, kvevents.Options{Endpoint: "tcp://127.0.0.1:0", HWM: -1})
				if err != nil {
					b.Fatal(err)
				}
				defer pub.Close()
				sub := zmq4.NewSub(ctx)
				defer sub.Close()
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
				if enc, err = kvevents.NewEncoder(kvevents.EncoderOptions{}); err != nil {
					b.Fatal(err)
				}
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
