package flagparse

import "errors"

var (
	// ErrEmpty reports a list with no item.
	ErrEmpty = errors.New("flagparse: empty list")
	// ErrUnknownName reports a name that is not among the known ones.
	ErrUnknownName = errors.New("flagparse: unknown name")
	// ErrRepeated reports a name given twice to Names.
	ErrRepeated = errors.New("flagparse: name given twice")
	// ErrNumber reports an item that is not a finite number.
	ErrNumber = errors.New("flagparse: not a number")
	// ErrSize reports a size that is not a number with a known unit, or
	// is out of range.
	ErrSize = errors.New("flagparse: bad size")
)
