// Package published finds the program output that the project's documents
// quote and compares it with what the program prints today, so that a
// quoted excerpt cannot go stale. The examples' TestPublishedExcerptIsCurrent
// tests use it; they run only with KVTIER_CHECK_PUBLISHED=1 (see Enabled).
//
// An excerpt is a fenced block of a markdown file, found by an anchor:
//
//   - an anchor that starts with "$ " is a command line inside a fence (as
//     RESULTS.md writes them); the excerpt is the lines after it, up to the
//     next "$ " line or the end of the fence;
//   - any other anchor is a piece of one prose line outside fences (the
//     sentence that names the command); the excerpt is the whole fenced
//     block that follows it.
//
// The anchor must occur exactly once in the document, so that a new quote
// cannot shift which block is checked.
//
// A line "..." in an excerpt marks lines left out: the lines between two
// such marks must appear in the output consecutively, and the groups in the
// order they are quoted. Trailing spaces are ignored on both sides.
package published

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// EnvVar turns the checks on: the examples' excerpt tests skip unless it is
// set (CI sets it).
const EnvVar = "KVTIER_CHECK_PUBLISHED"

// Enabled reports whether EnvVar is set.
func Enabled() bool { return os.Getenv(EnvVar) != "" }

// Gap is the line that marks lines left out of an excerpt.
const Gap = "..."

const fence = "```"

// Read returns the excerpt the anchor introduces in the markdown file at
// path (see the package documentation), one string per line.
func Read(path, anchor string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines, err := Find(string(data), anchor)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return lines, nil
}

// Find is Read on a document's text.
func Find(doc, anchor string) ([]string, error) {
	if anchor == "" {
		return nil, errors.New("empty anchor")
	}
	lines := strings.Split(doc, "\n")
	command := strings.HasPrefix(anchor, "$ ")
	at, found := -1, 0
	inFence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), fence) {
			inFence = !inFence
			continue
		}
		hit := false
		if command {
			hit = inFence && strings.TrimRight(l, " \t") == anchor
		} else {
			hit = !inFence && strings.Contains(l, anchor)
		}
		if hit {
			found++
			if at < 0 {
				at = i
			}
		}
	}
	switch {
	case found == 0:
		return nil, fmt.Errorf("no excerpt anchored at %q", anchor)
	case found > 1:
		return nil, fmt.Errorf("anchor %q occurs %d times: it must name one excerpt", anchor, found)
	}
	start := at + 1
	if !command {
		for start < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[start]), fence) {
			start++
		}
		if start == len(lines) {
			return nil, fmt.Errorf("no fenced block after %q", anchor)
		}
		start++
	}
	var out []string
	for i := start; ; i++ {
		if i == len(lines) {
			return nil, fmt.Errorf("the fenced block at %q does not close", anchor)
		}
		l := strings.TrimRight(lines[i], " \t")
		if strings.HasPrefix(strings.TrimSpace(l), fence) || (command && strings.HasPrefix(l, "$ ")) {
			break
		}
		out = append(out, l)
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the excerpt at %q is empty", anchor)
	}
	return out, nil
}

// Options adjust a comparison for what a run cannot reproduce.
type Options struct {
	// Mask: every match, in the excerpt and in the output alike, is
	// replaced by "<masked>" before comparing (a wall time, a free port).
	Mask []*regexp.Regexp
	// Omit: output lines that match are dropped before comparing (lines
	// the document says it leaves out).
	Omit []*regexp.Regexp
}

// Compare reports, as an error naming the first line that differs, whether
// the excerpt is what output contains (see the package documentation).
func Compare(excerpt []string, output string, o Options) error {
	mask := func(l string) string {
		l = strings.TrimRight(l, " \t")
		for _, re := range o.Mask {
			l = re.ReplaceAllString(l, "<masked>")
		}
		return l
	}
	var got []string
	for _, l := range strings.Split(strings.TrimRight(output, "\n"), "\n") {
		omit := false
		for _, re := range o.Omit {
			omit = omit || re.MatchString(l)
		}
		if !omit {
			got = append(got, mask(l))
		}
	}
	var groups [][]string
	cur := []string{}
	for _, l := range excerpt {
		if strings.TrimSpace(l) == Gap {
			if len(cur) > 0 {
				groups = append(groups, cur)
			}
			cur = []string{}
			continue
		}
		cur = append(cur, mask(l))
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	if len(groups) == 0 {
		return errors.New("the excerpt has no lines to compare")
	}
	from := 0
	for _, g := range groups {
		at := indexLines(got[from:], g)
		if at < 0 {
			return fmt.Errorf("quoted lines not in the output (in this order): %s", firstMiss(got[from:], g))
		}
		from += at + len(g)
	}
	return nil
}

// indexLines returns where want starts in got, consecutively, or -1.
func indexLines(got, want []string) int {
	for i := 0; i+len(want) <= len(got); i++ {
		ok := true
		for j := range want {
			if got[i+j] != want[j] {
				ok = false
				break
			}
		}
		if ok {
			return i
		}
	}
	return -1
}

// firstMiss describes the first line of want that breaks the longest
// consecutive match of want's beginning in got.
func firstMiss(got, want []string) string {
	best, bestAt := 0, -1
	for i := range got {
		n := 0
		for n < len(want) && i+n < len(got) && got[i+n] == want[n] {
			n++
		}
		if n > best {
			best, bestAt = n, i
		}
	}
	if bestAt < 0 || best >= len(want) {
		return fmt.Sprintf("%q is not printed", want[0])
	}
	next := "the output ends"
	if bestAt+best < len(got) {
		next = fmt.Sprintf("the output has %q", got[bestAt+best])
	}
	return fmt.Sprintf("after %d matching line(s), the document has %q where %s", best, want[best], next)
}

// Check is Read then Compare, with the document and the anchor in the error.
func Check(path, anchor, output string, o Options) error {
	excerpt, err := Read(path, anchor)
	if err != nil {
		return err
	}
	if err := Compare(excerpt, output, o); err != nil {
		return fmt.Errorf("%s, the excerpt at %q: %w", path, anchor, err)
	}
	return nil
}
