package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func TestCurlAClusterIP(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "../../testdata/scenarios/curl-a-clusterip.yaml"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines:\n%s", out.String())
	}
	for i, re := range []*regexp.Regexp{
		regexp.MustCompile(`^(curl|Go) from external:local: answered by default/web-\S+ on node-[ab]; it saw the client as (172\.18\.0\.2|10\.244\.0\.1), node node-a's address \(masqueraded\)$`),
		regexp.MustCompile(`^(curl|Go) from pod:default/client: answered by default/web-\S+ on node-[ab]; it saw the client as 10\.244\.1\.\d+, pod default/client's own address$`),
	} {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d: %q, want %s", i+1, lines[i], re)
		}
	}
}
