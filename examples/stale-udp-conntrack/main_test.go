package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestStaleUDPConntrack(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	find := func(prefix string) int {
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i
			}
		}
		t.Fatalf("no line %q:\n%s", prefix, out.String())
		return -1
	}
	first, stale, fresh := find("datagram from :5000:"), find("stats-0 deleted, node-a not synced:"), find("after node-a's kube-proxy synced:")
	if !strings.Contains(lines[first], "replied pod default/stats-0") {
		t.Errorf("the flow should start at stats-0: %s", lines[first])
	}
	if !strings.Contains(lines[stale], "dropped") || !strings.Contains(lines[stale+1], "sport=5000") {
		t.Errorf("the stale entry should drop the flow and still be listed:\n%s\n%s", lines[stale], lines[stale+1])
	}
	if !strings.Contains(lines[fresh], "replied pod default/stats-1") {
		t.Errorf("after the sync the flow should reach stats-1: %s", lines[fresh])
	}
}
