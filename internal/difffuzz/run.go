package difffuzz

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// EnvCases is the environment variable that asks the fuzzers for N cases from a random
// seed (printed; -rapid.seed=S replays it) instead of their fixed-seed default.
const EnvCases = "CLUSTERLAB_DIFFFUZZ"

// Fuzzer is one emulator's side of a differential fuzzer.
type Fuzzer struct {
	Name    string // the test, for the written case's comment ("TestKernelDiffFuzz (nft backend)")
	CaseDir string // where regression cases live (testdata/difffuzz)
	Backend string // the kernel backend (cases with another backend are skipped)
	// Backends are the values a case's backend key may take.
	Backends []string
	Cases    int // cases in a plain run, from the fixed seed
	// Draw draws a packet and a ruleset for it.
	Draw func(t *rapid.T) (Packet, string)
	// Predict loads the ruleset into the emulator and walks the packet: the
	// prediction (Expect's words, or "load error" with err set), a kind tag for the
	// log ("/dnat", "/snat"), and the path for a failure message.
	Predict func(ruleset string, p Packet) (pred, tag, path string, err error)
	// Load loads the ruleset into the kernel node; IsLoadError says whether an error
	// of Load is the tool refusing the ruleset (else the run fails).
	Load        func(ctx context.Context, ruleset string) error
	IsLoadError func(error) bool
}

// Run replays f's regression cases through the kernel k, then draws cases with rapid
// (f.Cases from the fixed seed; EnvCases=N: N from a random seed), loads each into the
// kernel and the emulator, and fails on a difference after writing the shrunk case to
// f.CaseDir.
func Run(t *testing.T, k *Kernel, f Fuzzer) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	send := func(ruleset string, p Packet, predicted string) (string, error) {
		if err := f.Load(ctx, ruleset); err != nil {
			return "", err
		}
		return k.Send(ctx, p, predicted)
	}

	ok := t.Run("regressions", func(t *testing.T) {
		for name, c := range LoadCases(t, f.CaseDir, f.Backends) {
			if c.Backend != "" && c.Backend != f.Backend {
				t.Logf("%s: for the %s backend only", name, c.Backend)
				continue
			}
			pred := c.Emulator
			if c.Expect == "same" {
				pred = c.Kernel
			}
			got, err := send(c.Ruleset, c.Packet, pred)
			if err != nil {
				got = "load error"
			}
			if got != c.Kernel {
				t.Errorf("%s: %s: the kernel shows %q, the case recorded %q", name, c.Packet, got, c.Kernel)
			}
		}
	})
	if !ok {
		t.Fatal("the regression cases do not hold on this kernel: no fuzzing until they do")
	}

	cases, random := f.Cases, false
	if s := os.Getenv(EnvCases); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of cases", EnvCases, s)
		}
		cases, random = n, true
	}
	if !FlagSet("rapid.checks") {
		defer SetFlag(t, "rapid.checks", strconv.Itoa(cases))()
	}
	if random && !FlagSet("rapid.seed") {
		seed := rand.Uint64()
		defer SetFlag(t, "rapid.seed", strconv.FormatUint(seed, 10))()
		t.Logf("differential fuzzer: %d cases from seed %d (replay: -rapid.seed=%d)", cases, seed, seed)
	}

	var lastFail *Case
	t.Cleanup(func() {
		if lastFail != nil {
			writeCase(t, f, lastFail)
		}
	})
	start := time.Now()
	n := 0
	seen := map[string]int{} // what the kernel showed, by kind, for the log
	t.Cleanup(func() { t.Logf("kernel observations: %v", seen) })
	rapid.Check(t, func(rt *rapid.T) {
		n++
		p, rs := f.Draw(rt)
		c := &Case{Packet: p, Ruleset: rs, Expect: "same", Backend: ""}
		pred, tag, path, emuErr := f.Predict(rs, p)
		c.Emulator = pred
		if emuErr != nil {
			c.Emulator = "load error"
		}
		obs, kerr := send(rs, p, c.Emulator)
		if kerr != nil {
			if f.IsLoadError == nil || !f.IsLoadError(kerr) {
				rt.Fatalf("kernel: %v", kerr)
			}
			obs = "load error"
		}
		c.Kernel = obs
		kind := strings.Fields(obs)[0]
		if kind == "answered" {
			kind += tag
		}
		seen[kind]++
		if obs == "load error" && c.Emulator == "load error" {
			return
		}
		if obs != c.Emulator {
			lastFail = c
			detail := ""
			if kerr != nil {
				detail += "\nkernel: " + kerr.Error()
			}
			if emuErr != nil {
				detail += "\nemulator: " + emuErr.Error()
			} else {
				detail += "\nemulator's path: " + path
			}
			rt.Fatalf("%s: the kernel shows %q, the emulator predicts %q%s\nruleset:\n%s", p, obs, c.Emulator, detail, rs)
		}
	})
	t.Logf("%d cases (with shrinking) in %v", n, time.Since(start).Round(time.Millisecond))
}

// writeCase writes the last (shrunk) failing case under f.CaseDir, named by a hash of
// its packet and ruleset.
func writeCase(t *testing.T, f Fuzzer, c *Case) {
	sum := sha256.Sum256(append([]byte(c.Packet.String()), c.Ruleset...))
	name := filepath.Join(f.CaseDir, fmt.Sprintf("%x.case", sum[:6]))
	c.Comment = append([]string{"Found by " + f.Name + " on " + time.Now().UTC().Format("2006-01-02") + "."},
		"Fix the emulator (then this case must pass as it is), or, for a difference",
		"that is not a bug or too large to fix now, set expect to \"differ: WHY\".")
	err := os.MkdirAll(f.CaseDir, 0o755)
	if err == nil {
		err = os.WriteFile(name, c.Format(), 0o644)
		if err == nil {
			t.Errorf("the shrunk case is written to %s:\n%s", name, c.Format())
			return
		}
	}
	t.Errorf("the shrunk case (not written to %s: %v):\n%s", name, err, c.Format())
}

// SetFlag sets a test flag and returns what restores it.
func SetFlag(t testing.TB, name, value string) func() {
	fl := flag.Lookup(name)
	if fl == nil {
		t.Fatalf("no flag %s", name)
	}
	old := fl.Value.String()
	if err := fl.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	return func() { _ = fl.Value.Set(old) }
}

// FlagSet says whether a flag was given on the command line.
func FlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
