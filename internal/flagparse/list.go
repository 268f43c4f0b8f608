package flagparse

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Split returns the comma-separated items of s, each trimmed of surrounding
// white space, in order; empty items are dropped (so "" gives none).
func Split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Names parses s, a comma-separated list of names from known, into the
// names in the order given. A name is compared with known ignoring case and
// returned as known spells it. A name not in known is an error wrapping
// ErrUnknownName, a name given twice one wrapping ErrRepeated (it would run,
// and print, the same thing twice), and a list with no name one wrapping
// ErrEmpty.
func Names(s string, known []string) ([]string, error) {
	return names(s, known, false)
}

// NameSet is Names for programs that take a name given twice as given once:
// a repeat is dropped (the first place counts) instead of being an error.
func NameSet(s string, known []string) ([]string, error) {
	return names(s, known, true)
}

func names(s string, known []string, dropRepeats bool) ([]string, error) {
	var out []string
	for _, f := range Split(s) {
		i := slices.IndexFunc(known, func(k string) bool { return strings.EqualFold(k, f) })
		if i < 0 {
			return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownName, f, strings.Join(known, ", "))
		}
		if slices.Contains(out, known[i]) {
			if dropRepeats {
				continue
			}
			return nil, fmt.Errorf("%w: %q", ErrRepeated, known[i])
		}
		out = append(out, known[i])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %q has no name (want some of %s)", ErrEmpty, s, strings.Join(known, ", "))
	}
	return out, nil
}

// Floats parses s, a comma-separated list of finite numbers, in the order
// given. An item that is not a finite number is an error wrapping
// ErrNumber, a list with no item one wrapping ErrEmpty. Ranges and repeats
// are the caller's to check.
func Floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range Split(s) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: %q", ErrNumber, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %q has no number", ErrEmpty, s)
	}
	return out, nil
}
