package published

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const doc = "# Doc\n\n" +
	"`go run ./x` prints:\n\n" +
	"```\nb\nc\n```\n\n" +
	"```\n$ go run ./y\nl1\nl2\n\n$ go run ./y -z\n...\nl4  \n...\nl6\n```\n"

func TestFind(t *testing.T) {
	got, err := Find(doc, "`go run ./x` prints")
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "c"}, got)

	got, err = Find(doc, "$ go run ./y")
	require.NoError(t, err)
	assert.Equal(t, []string{"l1", "l2"}, got, "a command anchor is a whole line and stops at the next one")

	got, err = Find(doc, "$ go run ./y -z")
	require.NoError(t, err)
	assert.Equal(t, []string{"...", "l4", "...", "l6"}, got)

	_, err = Find(doc, "nowhere")
	assert.ErrorContains(t, err, "no excerpt")
	_, err = Find(doc+"\n`go run ./x` prints again\n```\nd\n```\n", "`go run ./x` prints")
	assert.ErrorContains(t, err, "2 times")
	_, err = Find("`go run ./x` prints\n", "`go run ./x` prints")
	assert.ErrorContains(t, err, "no fenced block")
	_, err = Find("`go run ./x` prints\n```\na\n", "`go run ./x` prints")
	assert.ErrorContains(t, err, "does not close")
	_, err = Find(doc, "l1")
	assert.ErrorContains(t, err, "no excerpt", "a prose anchor is not looked for inside fences")
}

func TestCompare(t *testing.T) {
	out := "l1\nl2\nl3  \nl4\nl5\ntime: 1.5s\n"
	for _, ok := range [][]string{
		{"l1", "l2"},
		{"l3", "l4"},
		{"...", "l2", "...", "l4", "l5"},
		{"l1", "...", "l5", "time: 9.9s"},
	} {
		assert.NoError(t, Compare(ok, out, Options{Mask: []*regexp.Regexp{regexp.MustCompile(`time: \S+`)}}), "%q", ok)
	}
	for _, bad := range [][]string{
		{"l1", "l3"},                      // not consecutive
		{"l4", "...", "l2"},               // out of order
		{"l1", "l2", "l3", "l4x"},         // a changed line
		{"l5", "time: 9.9s"},              // unmasked
		{"...", "l5", "time: 1.5s", "l6"}, // past the end
		{"..."},
	} {
		assert.Error(t, Compare(bad, out, Options{}), "%q", bad)
	}
	err := Compare([]string{"l2", "l3", "l9"}, out, Options{})
	assert.ErrorContains(t, err, `after 2 matching line(s), the document has "l9" where the output has "l4"`)
	assert.NoError(t, Compare([]string{"l1", "l3"}, out, Options{Omit: []*regexp.Regexp{regexp.MustCompile(`^l2$`)}}))
}
