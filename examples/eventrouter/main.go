// Command eventrouter shows a KV-aware router that learns, from vLLM's
// KV events on the wire alone, which server holds which block on which
// medium. Two caches play two servers; each publishes its translated
// events over ZMQ on 127.0.0.1; the router follows both with
// kvevents.Subscribers, keeps a kvevents.Index, sends every request to
// the server holding its longest prefix, and after every step checks its
// view of each server against that server's own state.
//
//	go run ./examples/eventrouter [-steps 300] [-seed 1] [-encoding positional|map] [-hashes int|bytes] [-route prefix|roundrobin]
//
// It prints one JSON line per check (a step and a server) with "match",
// then a summary line. It fails when a check does not match.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "eventrouter:", err)
		stop()
		os.Exit(1)
	}
}

// check is one JSON line: the router's view of one server after a step.
type check struct {
	Step   int    `json:"step"`
	Server string `json:"server"`
	// Routed says whether this step's request went to this server, with
	// the tokens the router expected it to reuse and those it reused.
	Routed    bool `json:"routed"`
	Predicted int  `json:"predicted_tokens,omitempty"`
	Reused    int  `json:"reused_tokens,omitempty"`
	// Blocks counts the blocks the server can serve a prefix from, per
	// medium, as its cache says; Seq is the last sequence number the
	// router applied.
	Blocks map[string]int `json:"blocks"`
	Seq    uint64         `json:"seq"`
	// Match says whether the router's view equals the server's own:
	// the same blocks, each on the same medium.
	Match bool `json:"match"`
}

// summary is the last line.
type summary struct {
	Summary    bool    `json:"summary"`
	Checks     int     `json:"checks"`
	Matched    int     `json:"matched"`
	Exact      int     `json:"predictions_exact"`
	Requests   int     `json:"requests"`
	Batches    int     `json:"batches"`
	Events     int     `json:"events"`
	WireBytes  int     `json:"wire_bytes"`
	Replays    int     `json:"replays"`
	ReusedFrac float64 `json:"reused_fraction"`
}

// server is one cache with its publisher.
type server struct {
	name  string
	cache *kvcache.Cache
	tr    *kvevents.Translator
	pub   *kvevents.Publisher
	enc   *kvevents.Encoder
	sub   *kvevents.Subscriber // the router's
	last  uint64               // the last sequence number published
	any   bool                 // something was published
	// applied is the last sequence number the router applied, when
	// caught is set.
	applied uint64
	caught  bool
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eventrouter", flag.ContinueOnError)
	steps := fs.Int("steps", 300, "requests to route")
	seed := fs.Uint64("seed", 1, "seed of the workload")
	encoding := fs.String("encoding", "positional", "event layout on the wire: positional or map")
	hashes := fs.String("hashes", "int", "block hashes on the wire: int or bytes")
	policy := fs.String("route", "prefix", "routing: prefix (the longest prefix the events show) or roundrobin (ignore them)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var eo kvevents.EncoderOptions
	switch *encoding {
	case "positional":
	case "map":
		eo.Encoding = kvevents.TaggedMap
	default:
		return fmt.Errorf("-encoding %q: want positional or map", *encoding)
	}
	switch *hashes {
	case "int":
	case "bytes":
		eo.HashEncoding = kvevents.HashBytes
	default:
		return fmt.Errorf("-hashes %q: want int or bytes", *hashes)
	}
	if *policy != "prefix" && *policy != "roundrobin" {
		return fmt.Errorf("-route %q: want prefix or roundrobin", *policy)
	}
	if *steps < 1 {
		return fmt.Errorf("-steps %d: want at least 1", *steps)
	}

	const model, blockTokens, hashSeed = "toy", 16, 7
	l, err := layout.New(layout.Model{Name: model, Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 2}, layout.PagedLayer, blockTokens)
	if err != nil {
		return err
	}
	var servers []*server
	defer func() {
		for _, s := range servers {
			if s.sub != nil {
				_ = s.sub.Close()
			}
			_ = s.pub.Close()
		}
	}()
	for _, name := range []string{"s1", "s2"} {
		// The Translator reads block-level events only: UnitMoved is left out.
		c, err := kvcache.New(kvcache.Config{Layout: l, HashSeed: hashSeed, EventBuffer: 1 << 14, BlockEventsOnly: true, Tiers: []kvcache.TierConfig{
			{Capacity: kvcache.Capacity{Units: 40}}, {Capacity: kvcache.Capacity{Units: 40}}, {Name: "disk", Capacity: kvcache.Capacity{Units: 60}}}})
		if err != nil {
			return err
		}
		pub, err := kvevents.NewPublisher(ctx, kvevents.Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
			Server: name, Model: model, Encoder: eo})
		if err != nil {
			return err
		}
		enc, err := kvevents.NewEncoder(eo)
		if err != nil {
			return err
		}
		s := &server{name: name, cache: c, tr: kvevents.NewTranslator(c), pub: pub, enc: enc}
		servers = append(servers, s)
		// The router subscribes by topic and replays from 0, so it misses
		// nothing published before its subscription took effect.
		s.sub, err = kvevents.NewSubscriber(ctx, kvevents.SubscriberOptions{Endpoint: pub.Addr(), ReplayEndpoint: pub.ReplayAddr(),
			Topic: pub.Topic(), From: kvevents.Ptr(uint64(0))})
		if err != nil {
			return err
		}
	}

	hasher, err := radix.NewHasher(blockTokens, hashSeed)
	if err != nil {
		return err
	}
	var ix kvevents.Index
	var scores []kvevents.Score
	rng := rand.New(rand.NewPCG(*seed, 0))
	out := json.NewEncoder(stdout)
	sum := summary{Summary: true}
	prompted := 0
	for step := range *steps {
		req := request(rng, blockTokens)
		prompted += len(req.Tokens)
		hs, err := hasher.Hash(nil, radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}, req.Tokens, req.Extra)
		if err != nil {
			return err
		}
		// The longest prefix wins (Index.Score, every block worth 1); a
		// tie goes to the server with fewer blocks, then to the first.
		best := servers[step%len(servers)]
		if *policy == "prefix" {
			scores = ix.Score(scores[:0], hs, nil)
			held := make(map[string]int, len(scores))
			for _, sc := range scores {
				held[sc.Server] = sc.Blocks
			}
			best = servers[0]
			for _, s := range servers[1:] {
				a, b := held[s.name], held[best.name]
				if a > b || a == b && ix.Len(s.name) < ix.Len(best.name) {
					best = s
				}
			}
		}
		predicted := ix.Match(best.name, hs) * blockTokens
		plan, err := best.cache.Acquire(req)
		if err != nil {
			return err
		}
		if err := best.cache.Commit(plan.Seq, len(req.Tokens)); err != nil {
			return err
		}
		if err := best.cache.Release(plan.Seq); err != nil {
			return err
		}
		sum.Requests++
		sum.ReusedFrac += float64(plan.ReusedTokens)
		if predicted == plan.ReusedTokens {
			sum.Exact++
		}

		// The server publishes its step as one batch.
		evs, dropped, err := best.cache.TakeEvents(nil)
		if err != nil {
			return err
		}
		if dropped > 0 {
			return fmt.Errorf("%s dropped %d events: the event buffer is too small", best.name, dropped)
		}
		batch := kvevents.Batch{Timestamp: float64(time.Now().UnixNano()) / 1e9, Events: best.tr.Append(nil, evs)}
		if best.last, err = best.pub.Publish(batch); err != nil {
			return err
		}
		best.any = true
		sum.Batches++
		sum.Events += len(batch.Events)
		if p, err := best.enc.Encode(batch); err == nil {
			sum.WireBytes += len(p)
		}

		for _, s := range servers {
			seq, err := follow(ctx, s, &ix)
			if err != nil {
				return err
			}
			want, err := s.tr.Reachable(s.cache)
			if err != nil {
				return err
			}
			c := check{Step: step, Server: s.name, Routed: s == best, Blocks: map[string]int{}, Seq: seq, Match: same(&ix, s.name, want)}
			if c.Routed {
				c.Predicted, c.Reused = predicted, plan.ReusedTokens
			}
			for _, m := range want {
				c.Blocks[m]++
			}
			sum.Checks++
			if c.Match {
				sum.Matched++
			}
			if err := out.Encode(c); err != nil {
				return err
			}
		}
	}
	for _, s := range servers {
		sum.Replays += s.sub.Replays()
	}
	sum.ReusedFrac /= float64(prompted)
	if err := out.Encode(sum); err != nil {
		return err
	}
	if sum.Matched != sum.Checks {
		return fmt.Errorf("%d of %d checks did not match", sum.Checks-sum.Matched, sum.Checks)
	}
	return nil
}

// follow applies s's batches to ix up to the last one s published and
// returns the last sequence number applied.
func follow(ctx context.Context, s *server, ix *kvevents.Index) (uint64, error) {
	if !s.any || s.caught && s.applied >= s.last {
		return s.applied, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		m, err := s.sub.Next(ctx)
		if err != nil {
			return 0, fmt.Errorf("following %s: %w", s.name, err)
		}
		if m.Missed > 0 {
			// Lost for good: the view starts over from what follows.
			ix.Forget(s.name)
		}
		ix.Apply(s.name, m.Batch)
		s.applied, s.caught = m.Seq, true
		if m.Seq >= s.last {
			return m.Seq, nil
		}
	}
}

// same reports whether the router's view of server is exactly want.
func same(ix *kvevents.Index, server string, want map[uint64]string) bool {
	if ix.Len(server) != len(want) {
		return false
	}
	for h, m := range want {
		got := ix.Media(server, h)
		if len(got) != 1 || got[0] != m {
			return false
		}
	}
	return true
}

// request returns a chat-like request: one of 4 system prompts of 3
// blocks, then one of 6 conversation turns of 1-3 blocks, from one of
// two tenants (namespaces) and sometimes under a LoRA adapter.
func request(rng *rand.Rand, blockTokens int) kvcache.Request {
	system := uint32(rng.IntN(4))
	turn := uint32(rng.IntN(6))
	var tokens []uint32
	for i := range 3 * blockTokens {
		tokens = append(tokens, 1000*system+uint32(i))
	}
	for i := range (1 + int(turn)%3) * blockTokens {
		tokens = append(tokens, 100000+1000*turn+uint32(i))
	}
	req := kvcache.Request{Tokens: tokens, Namespace: []string{"tenant-a", "tenant-b"}[rng.IntN(2)]}
	if rng.IntN(5) == 0 {
		req.LoRA = "sql"
	}
	return req
}
