// Package fixedseed makes the property tests of a package that imports it (for its
// effect, from a _test.go file) start from a fixed seed, so that `go test ./...` gives
// the same result on every run. A seed given on the command line wins:
// -rapid.seed=N replays a seed, and -rapid.seed=0 asks rapid for a random one
// (exploration, opt-in).
package fixedseed

import (
	"flag"

	_ "pgregory.net/rapid" // registers -rapid.seed
)

// Seed is the seed property tests start from when -rapid.seed is not given.
const Seed = "1"

func init() {
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" {
		_ = f.Value.Set(Seed)
	}
}
