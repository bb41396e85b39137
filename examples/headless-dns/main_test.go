package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHeadlessDNS(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	parts := strings.Split(s, "the client's resolver")
	if len(parts) != 2 {
		t.Fatalf("output:\n%s", s)
	}
	before, after := parts[0], parts[1]
	for _, want := range []string{
		"A db.default.svc.cluster.local.: NOERROR",
		"db.default.svc.cluster.local.\t30\tIN\tA\t10.244.0.",
		"db.default.svc.cluster.local.\t30\tIN\tA\t10.244.1.",
		"db-1.db.default.svc.cluster.local.\t30\tIN\tA\t10.244.1.",
		"SRV\t0 50 5432 db-0.db.default.svc.cluster.local.",
		"SRV\t0 50 5432 db-1.db.default.svc.cluster.local.",
	} {
		if !strings.Contains(before, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(after, "IN\tA\t") != 1 || strings.Contains(after, "\tA\t10.244.1.") {
		t.Errorf("after db-1 went unready, only db-0 should answer:\n%s", after)
	}
}
