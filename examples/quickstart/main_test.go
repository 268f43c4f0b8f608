package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun checks what the quickstart claims to show: b reuses the system
// prompt a computed, on the GPU; c pushes it to the CPU and overwrites its
// GPU slots; d gets it back from the CPU with a's bytes intact.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	s := out.String()
	t.Log("\n" + s)
	section := func(name string) string {
		i := strings.Index(s, name+": ")
		require.GreaterOrEqual(t, i, 0, name)
		rest := s[i+3:]
		if j := regexp.MustCompile(`(?m)^[a-z]: `).FindStringIndex(rest); j != nil {
			rest = rest[:j[0]]
		}
		return s[i:i+3] + rest
	}
	assert.Contains(t, section("a"), "reused 0 ")
	b := section("b")
	assert.Contains(t, b, "reused 32 (2 blocks on GPU, 0 onboarded")
	assert.Contains(t, b, `holds "a's block 0"`)
	assert.Contains(t, b, `holds "a's block 1"`)

	computedInto := regexp.MustCompile(`computed into GPU slot (\d+)`)
	cSlots := map[string]bool{}
	for _, m := range computedInto.FindAllStringSubmatch(section("c"), -1) {
		cSlots[m[1]] = true
	}
	require.Len(t, cSlots, 4, "c's four blocks take the whole GPU")
	assert.Regexp(t, `offloaded [1-9]`, section("c"), "c makes room by offloading")

	d := section("d")
	assert.Contains(t, d, "reused 32 (0 blocks on GPU, 2 onboarded from CPU)")
	holds := regexp.MustCompile(`block (\d) in GPU slot (\d+) holds "(.*)"`).FindAllStringSubmatch(d, -1)
	require.Len(t, holds, 2)
	for _, m := range holds {
		assert.Equal(t, "a's block "+m[1], m[3], "the onboarded bytes are the ones a wrote")
		assert.True(t, cSlots[m[2]], "slot %s was overwritten by c, so the bytes came back from the CPU", m[2])
	}
	assert.Contains(t, s, "4 offloads, 2 onboards")
}
