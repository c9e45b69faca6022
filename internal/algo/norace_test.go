//go:build !race

package algo_test

// raceEnabled is true when the race detector is on; the property tests then
// draw fewer traces, since every step runs several times slower.
const raceEnabled = false
