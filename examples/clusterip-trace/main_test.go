package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestClusterIPTrace(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	// The chain walk kube-proxy's rules make: PREROUTING -> KUBE-SERVICES -> KUBE-SVC -> KUBE-SEP -> DNAT.
	order := []string{"nat/PREROUTING line", "nat/KUBE-SERVICES line", "nat/KUBE-SVC-", "nat/KUBE-SEP-", "DNAT --to-destination 10.244."}
	rest := s
	for _, w := range order {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("output lacks %q after the previous steps:\n%s", w, s)
		}
		rest = rest[i:]
	}
	if n := len(regexp.MustCompile(`p=0\.3333  delivered pod default/backend-\d`).FindAllString(s, -1)); n != 3 {
		t.Errorf("want 3 branches of probability 1/3:\n%s", s)
	}
}
