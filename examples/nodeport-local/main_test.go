package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestNodePortLocal(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"externalTrafficPolicy Cluster via node-a: default/web-0 answered but saw 172.18.0.2, not the laptop",
		"externalTrafficPolicy Cluster via node-b: default/web-0 answered but saw ",
		"externalTrafficPolicy Local   via node-a: dropped",
		"externalTrafficPolicy Local   via node-b: default/web-0 answered and saw the laptop's own address 203.0.113.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}
