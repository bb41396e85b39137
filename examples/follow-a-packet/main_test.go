package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestFollowAPacket: the lesson's four answers: the packet crosses node-a's PREROUTING
// (where a KUBE-SEP rule DNATs it) to a my-app backend; three branches of 1/3; the answer
// un-DNATed on node-a, seen from the VIP; every mode delivers it.
func TestFollowAPacket(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, false); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, re := range []string{
		`(?m)^1\. tcp packet from pod:default/client to service:default/my-service:80 \(10\.\S+:80\): delivered pod default/my-app-`,
		`\[node-a\] PREROUTING`,
		`the rule that chose the backend: nat/KUBE-SEP-\w+ line \d+ => DNAT to 10\.244\.`,
		`3\. the answer from pod:default/my-app-\S+ is un-DNATed at \[node-a\] POSTROUTING; the client sees it from 10\.\S+:80`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("the lesson's output lacks %s:\n%s", re, s)
		}
	}
	if n := strings.Count(s, "p=0.3333  delivered pod default/my-app-"); n != 3 {
		t.Errorf("%d branches of 1/3, want 3:\n%s", n, s)
	}
	if n := regexp.MustCompile(`(?m)^   (iptables|ipvs|nftables|userspace) +delivered`).FindAllString(s, -1); len(n) < 2 {
		t.Errorf("the modes:\n%s", s)
	}
}
