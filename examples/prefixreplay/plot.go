package main

// writeSVGFile is a placeholder until internal/svgplot lands.
func writeSVGFile(path string, rows []result, maxRatio float64) error { return nil }
