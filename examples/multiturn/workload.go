package main

import (
	"math"
	"math/rand/v2"
	"time"
)

// vocab is the size of the token alphabet. Tokens are drawn uniformly, so
// two different messages share a 16-token block with negligible probability:
// the only reuse is the reuse the workload means (a session's own history
// and the shared system prompts).
const vocab = 32000

// Log-normal shapes of message lengths. Chat message lengths are heavy-tailed
// (a few long pastes among many short questions); sigma fixes the tail, the
// mean comes from the flags.
const (
	userSigma   = 1.0
	answerSigma = 0.8
	maxMessage  = 4096
)

// workload is a generated set of sessions; every policy replays the same one.
type workload struct {
	sys      [][]uint32 // system prompts
	sessions []session
}

// session is one chat: it arrives, runs its turns, and leaves.
type session struct {
	arrival time.Duration
	sys     int // index into workload.sys, or -1
	turns   []turn
}

// turn is one exchange: the user message, the answer and the think time
// before the next turn's message (unused after the last turn).
type turn struct {
	user, answer []uint32
	think        time.Duration
}

// generate builds the workload of c. The same config always gives the same
// workload: one PCG stream for the session-level draws, and one per session
// (seeded with the session's index) for its tokens, so a session's text does
// not depend on how many draws the others took.
func generate(c config) workload {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6d756c7469747572))
	w := workload{}
	for i := 0; i < c.SysPrompts; i++ {
		w.sys = append(w.sys, randomTokens(rand.New(rand.NewPCG(c.Seed, uint64(1<<32+i))), c.SysLen))
	}
	var now time.Duration
	for i := 0; i < c.Sessions; i++ {
		now += seconds(rng.ExpFloat64() / c.Rate)
		s := session{arrival: now, sys: -1}
		ctx := 0
		if c.SysPrompts > 0 {
			s.sys = rng.IntN(c.SysPrompts)
			ctx = c.SysLen
		}
		turns := geometric(rng, c.TurnsMean, c.MaxTurns)
		tokRng := rand.New(rand.NewPCG(c.Seed, uint64(2<<32+i)))
		for k := 0; k < turns; k++ {
			u := logNormalLen(rng, c.UserMean, userSigma)
			a := logNormalLen(rng, c.AnswerMean, answerSigma)
			think := seconds(rng.ExpFloat64() * c.ThinkMean.Seconds())
			if ctx+u+a > c.MaxContext {
				if k > 0 {
					break
				}
				// The first turn always runs: shrink it to fit (validate
				// keeps at least two tokens of room after the system prompt).
				room := c.MaxContext - ctx
				u = max(1, min(u, room/2))
				a = min(a, room-u)
			}
			s.turns = append(s.turns, turn{user: randomTokens(tokRng, u), answer: randomTokens(tokRng, a), think: think})
			ctx += u + a
		}
		w.sessions = append(w.sessions, s)
	}
	return w
}

// seconds converts float seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// geometric draws a count >= 1 with the given mean, capped at limit.
func geometric(rng *rand.Rand, mean float64, limit int) int {
	p := 1 / mean
	n := 1
	for n < limit && rng.Float64() >= p {
		n++
	}
	return n
}

// logNormalLen draws a message length from a log-normal with the given mean
// and sigma, rounded and clipped to [1, maxMessage].
func logNormalLen(rng *rand.Rand, mean, sigma float64) int {
	mu := math.Log(mean) - sigma*sigma/2
	x := math.Round(math.Exp(mu + sigma*rng.NormFloat64()))
	return int(min(max(x, 1), maxMessage))
}

// randomTokens returns n tokens drawn uniformly from [1, vocab).
func randomTokens(rng *rand.Rand, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = 1 + uint32(rng.IntN(vocab-1))
	}
	return t
}

// promptTokens returns the prompt tokens of every turn of w: an independent
// count (from the workload alone) that the simulation's accounting must
// match.
func (w workload) promptTokens() int64 {
	var n int64
	for _, s := range w.sessions {
		ctx := 0
		if s.sys >= 0 {
			ctx = len(w.sys[s.sys])
		}
		for _, t := range s.turns {
			n += int64(ctx + len(t.user))
			ctx += len(t.user) + len(t.answer)
		}
	}
	return n
}

// turns returns the number of turns of w.
func (w workload) turns() int {
	n := 0
	for _, s := range w.sessions {
		n += len(s.turns)
	}
	return n
}
