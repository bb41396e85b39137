package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	re := regexp.MustCompile(`^web:80 answered by default/web-[01] on node-[ab]; it saw the client as 10\.244\.0\.\d+:\d+$`)
	if len(lines) != 4 {
		t.Fatalf("want 4 answers:\n%s", out.String())
	}
	for _, l := range lines {
		if !re.MatchString(l) {
			t.Errorf("unexpected line %q", l)
		}
	}
}
