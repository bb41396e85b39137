//go:build race

package dns

// raceEnabled: the race detector is on (its instrumentation changes stack frames).
const raceEnabled = true
