package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/layout"
)

// lineWith returns the first line of out that starts with prefix.
func lineWith(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", prefix, out)
	return ""
}

func TestSeedTable(t *testing.T) {
	var out, errOut bytes.Buffer
	require.NoError(t, run(nil, &out, &errOut))
	text := out.String()
	t.Log("\n" + text)
	assert.Empty(t, errOut.String())

	assert.Contains(t, lineWith(t, text, "paged-layer  32"), "1048576 B (1 MiB)")
	assert.Contains(t, lineWith(t, text, "bsa          512"), "2097152 B (2 MiB)")
	paged := lineWith(t, text, "paged-layer (32-token units)")
	assert.Contains(t, paged, "3584 units")
	assert.Contains(t, paged, "3758096384 B (3.5 GiB, 3584 MiB)")
	bsa := lineWith(t, text, "bsa (512-token units)")
	assert.Contains(t, bsa, "1120 units")
	assert.Contains(t, bsa, "2240 MiB")
	assert.Contains(t, text, "paged / bsa = 1.6\n")
}

func TestSeedJSON(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run([]string{"-json"}, &out, &bytes.Buffer{}))
	var rep report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, "seed", rep.Model.Name)
	require.Len(t, rep.Kinds, 3)
	byKind := map[string]kindInfo{}
	for _, k := range rep.Kinds {
		byKind[k.Kind] = k
	}
	assert.Equal(t, int64(1<<20), byKind["paged-layer"].Pools[0].UnitBytes)
	assert.Equal(t, int64(2<<20), byKind["bsa"].Pools[0].UnitBytes)
	assert.Equal(t, 224, byKind["bsa"].UnitsPerBlock)
	assert.Equal(t, int64(3584)<<20, rep.WorstCase.Paged.Bytes)
	assert.Equal(t, int64(2240)<<20, rep.WorstCase.BSA.Bytes)
	assert.InDelta(t, 1.6, rep.WorstCase.PagedOverBSA, 1e-12)
	assert.Contains(t, out.String(), `"worst_case_step"`)
}

func TestFlagsOverrideThePreset(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run([]string{"-json", "-preset", "llama2-13b", "-kvheads", "8", "-page", "16"}, &out, &bytes.Buffer{}))
	var rep report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, "Llama-2-13B", rep.Model.Name)
	assert.Equal(t, 8, rep.Model.KVHeads)
	assert.Equal(t, 40, rep.Model.QueryHeads)
	// GQA with 8 of 40 heads: 5× less than the MHA 3,355,443,200 bytes.
	assert.Equal(t, int64(3_355_443_200/5), rep.Kinds[0].ContextBytes)
	assert.Equal(t, 16, rep.Kinds[1].TokensPerUnit)

	out.Reset()
	require.NoError(t, run([]string{"-json", "-preset", "deepseek-v2"}, &out, &bytes.Buffer{}))
	rep = report{}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, int64(60*576*2), rep.BytesPerToken)

	out.Reset()
	require.NoError(t, run([]string{"-json", "-layers", "30", "-cla", "3", "-window", "1024"}, &out, &bytes.Buffer{}))
	rep = report{}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, 10, rep.Model.KVLayers)
	assert.Equal(t, 1024, rep.Kinds[1].Pools[0].Window)
	// 1024-token window over 32-token pages at 4096 tokens: 32 pages per KV layer.
	assert.Equal(t, int64(10*32), rep.Kinds[1].ContextUnits)
}

func TestBadInput(t *testing.T) {
	cases := []struct {
		args   []string
		target error
		says   string
	}{
		{[]string{"-kvheads", "5"}, layout.ErrInvalidModel, "not a multiple"},
		{[]string{"-page", "24"}, layout.ErrInvalidLayout, "block tokens 24"},
		{[]string{"-window", "-5"}, layout.ErrInvalidModel, "window -5 of layer 0"},
		{[]string{"-context", "0"}, nil, "context 0"},
		{[]string{"-layers", "2000000", "-window", "64"}, nil, "-window supports at most"},
		{[]string{"-topk", "0"}, nil, "top-k 0"},
		{[]string{"-preset", "gpt5"}, nil, "unknown preset"},
		{[]string{"-nope"}, nil, "not defined"},
		{[]string{"extra"}, nil, "unexpected arguments"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		err := run(c.args, &out, &errOut)
		require.Error(t, err, "%v", c.args)
		if c.target != nil {
			require.ErrorIs(t, err, c.target, "%v", c.args)
		}
		assert.Contains(t, err.Error(), c.says, "%v", c.args)
		assert.Empty(t, out.String(), "%v prints nothing on error", c.args)
	}
}

func TestBytesText(t *testing.T) {
	assert.Equal(t, "512 B", bytesText(512))
	assert.Equal(t, "1536 B (1.5 KiB)", bytesText(1536))
	assert.Equal(t, "1048576 B (1 MiB)", bytesText(1<<20))
	assert.Equal(t, "3758096384 B (3.5 GiB, 3584 MiB)", bytesText(3584<<20))
}
