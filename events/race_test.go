//go:build race

package events_test

// raceEnabled: the race detector slows decoding tenfold; the exhaustive
// differential tests sample their inputs under it.
const raceEnabled = true
