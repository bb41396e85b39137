package difffuzz

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Case is one differential case as a regression file holds it:
//
//	# comment lines: what was found and why
//	packet: tcp from node 192.168.77.1:3333 -> 10.244.0.2:80
//	kernel: timeout
//	emulator: timeout
//	expect: same
//	backend: nft        (optional)
//	ruleset:
//	... the ruleset, to the end of the file
type Case struct {
	Comment  []string // "# ..." lines: what was found and why
	Packet   Packet
	Kernel   string // what the kernel showed
	Emulator string // what the emulator predicted
	// Expect is "same" (the emulator must predict what the kernel showed: a fixed
	// difference) or "differ: REASON" (a known difference the emulator keeps).
	Expect string
	// Backend, when set, is the only backend (the iptables fuzzer's "nft" or "legacy")
	// whose kernel shows Kernel: the kernel replay skips the case under another.
	Backend string
	Ruleset string
}

// Format renders the case as a file.
func (c *Case) Format() []byte {
	var b bytes.Buffer
	for _, l := range c.Comment {
		fmt.Fprintf(&b, "# %s\n", l)
	}
	fmt.Fprintf(&b, "packet: %s\nkernel: %s\nemulator: %s\nexpect: %s\n", c.Packet, c.Kernel, c.Emulator, c.Expect)
	if c.Backend != "" {
		fmt.Fprintf(&b, "backend: %s\n", c.Backend)
	}
	fmt.Fprintf(&b, "ruleset:\n%s", c.Ruleset)
	return b.Bytes()
}

// ParseCase parses a case file; backends are the values its backend key may take
// (none: the key is refused). Errors name the file and line.
func ParseCase(name string, data []byte, backends []string) (*Case, error) {
	c := &Case{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	seen := map[string]bool{}
	for sc.Scan() {
		line++
		l := sc.Text()
		if rest, ok := strings.CutPrefix(l, "#"); ok {
			c.Comment = append(c.Comment, strings.TrimSpace(rest))
			continue
		}
		key, val, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q: want KEY: VALUE (packet, kernel, emulator, expect, backend, ruleset)", name, line, l)
		}
		val = strings.TrimSpace(val)
		if seen[key] {
			return nil, fmt.Errorf("%s:%d: %s given twice", name, line, key)
		}
		seen[key] = true
		switch key {
		case "packet":
			p, err := ParsePacket(val)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
			c.Packet = p
		case "kernel":
			c.Kernel = val
		case "emulator":
			c.Emulator = val
		case "expect":
			if val != "same" && !strings.HasPrefix(val, "differ: ") {
				return nil, fmt.Errorf("%s:%d: expect %q: want \"same\" or \"differ: REASON\"", name, line, val)
			}
			c.Expect = val
		case "backend":
			if !slices.Contains(backends, val) {
				if len(backends) == 0 {
					return nil, fmt.Errorf("%s:%d: backend %q: this fuzzer has no backends", name, line, val)
				}
				return nil, fmt.Errorf("%s:%d: backend %q: want %s", name, line, val, strings.Join(backends, " or "))
			}
			c.Backend = val
		case "ruleset":
			var rs strings.Builder
			for sc.Scan() {
				rs.WriteString(sc.Text() + "\n")
			}
			c.Ruleset = rs.String()
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q (want packet, kernel, emulator, expect, backend, ruleset)", name, line, key)
		}
	}
	for _, k := range []string{"packet", "kernel", "emulator", "expect", "ruleset"} {
		if !seen[k] {
			return nil, fmt.Errorf("%s: no %s", name, k)
		}
	}
	return c, sc.Err()
}

// LoadCases reads every dir/*.case.
func LoadCases(t testing.TB, dir string, backends []string) map[string]*Case {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.case"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Case{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseCase(f, data, backends)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = c
	}
	return out
}

// Check holds an emulator's prediction for a regression case (got) to the case: for
// "same", it is the kernel's observation; for "differ", the emulator's recorded one.
func (c *Case) Check(got string) error {
	switch {
	case c.Expect == "same" && got != c.Kernel:
		return fmt.Errorf("emulator predicts %q, the kernel showed %q", got, c.Kernel)
	case c.Expect != "same" && got != c.Emulator:
		return fmt.Errorf("emulator predicts %q, the case recorded %q (%s)", got, c.Emulator, c.Expect)
	}
	return nil
}
