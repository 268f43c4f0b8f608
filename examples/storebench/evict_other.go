//go:build !(linux && (amd64 || arm64))

package main

import "errors"

// canEvict says whether evictFile works here.
const canEvict = false

func evictFile(string) error { return errors.ErrUnsupported }
