package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
)

// backends returns the backends named on the line that starts with prefix.
func backends(t *testing.T, out, prefix string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return regexp.MustCompile(`web-\d`).FindAllString(l, -1)
		}
	}
	t.Fatalf("no line %q in\n%s", prefix, out)
	return nil
}

func TestSessionAffinity(t *testing.T) {
	for _, mode := range kubeproxy.Modes() {
		if mode == kubeproxy.Userspace {
			continue // probes stop at the userspace proxy's listener: see the scenario file
		}
		t.Run(string(mode), func(t *testing.T) {
			var out bytes.Buffer
			if err := run(&out, mode); err != nil {
				t.Fatal(err)
			}
			s := out.String()
			if strings.Contains(s, "failed") {
				t.Fatalf("failed connections:\n%s", s)
			}
			c1 := backends(t, s, "client-1, 20")
			if len(c1) != 1 || !strings.Contains(s, c1[0]+" x20") {
				t.Errorf("client-1 should stick to one backend:\n%s", s)
			}
			if b := backends(t, s, "client-2, 20"); len(b) != 1 {
				t.Errorf("client-2 should stick to one backend:\n%s", s)
			}
			if b := backends(t, s, "client-1 again after 50s"); len(b) != 1 || b[0] != c1[0] {
				t.Errorf("within the timeout client-1 should still reach %s:\n%s", c1[0], s)
			}
			if b := backends(t, s, "no affinity"); len(b) != 4 {
				t.Errorf("without affinity 40 connections should reach all 4 backends:\n%s", s)
			}
		})
	}
}
