package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestDNSInsertRace: on 5.4 some lookups wait 5 s, one insert_failed each, at a rate
// near the all-branches probability (1/4); on 5.6 and with single-request-reopen none.
func TestDNSInsertRace(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 80); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	parse := func(l string) (waited int, rate, odds float64, failed int) {
		t.Helper()
		_, rest, _ := strings.Cut(l, ":")
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d of %d lookups waited 5s (%f;", &waited, &n, &rate); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if i := strings.Index(l, "all branches "); i >= 0 {
			fmt.Sscanf(l[i:], "all branches %f", &odds)
		}
		fmt.Sscanf(l[strings.Index(l, "insert_failed="):], "insert_failed=%d", &failed)
		return
	}
	w, rate, odds, failed := parse(lines[0])
	if w == 0 || failed != w || odds != 0.25 || rate < 0.1 || rate > 0.4 {
		t.Errorf("5.4: %s\nwant some 5 s waits, one insert_failed each, near the all-branches 0.250", lines[0])
	}
	for _, l := range lines[1:] {
		if w, _, _, failed := parse(l); w != 0 || failed != 0 {
			t.Errorf("want no waits: %s", l)
		}
	}
}
