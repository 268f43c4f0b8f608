package jsonlines

import (
	"encoding/json"
	"io"
)

// Write writes each row of rows to w as one line of JSON (encoding/json's
// encoding, so only exported fields, with their json tags). It stops at and
// returns the first error, of encoding or of w; lines written before it
// stay written.
func Write[T any](w io.Writer, rows []T) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
