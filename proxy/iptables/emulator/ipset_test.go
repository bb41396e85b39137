package emulator

import (
	"strings"
	"testing"
)

func TestIPSetSave(t *testing.T) {
	in := mustRead(t, "../../../testdata/iptables/normalise/sets.ipset")
	s, err := ParseIPSetSave(in, "sets.ipset")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Names(), " "); got != "KUBE-CLUSTER-IP KUBE-LOOP-BACK KUBE-NODE-PORT-TCP KUBE-LB-SRC KUBE-LB KUBE-NETS KUBE-IPS" {
		t.Errorf("sets %s", got)
	}
	// Saving and parsing again gives the same text.
	out := s.Save()
	s2, err := ParseIPSetSave(out, "saved")
	if err != nil {
		t.Fatalf("saved sets do not parse: %v\n%s", err, out)
	}
	if string(s2.Save()) != string(out) {
		t.Errorf("not stable:\n%s", lineDiff(string(out), string(s2.Save())))
	}
	if !strings.Contains(string(out), `add KUBE-LB 1.2.3.4,tcp:80 comment "hello world"`) {
		t.Errorf("element options lost:\n%s", out)
	}
	cases := []struct{ in, msg string }{
		{"create A hash:ip\nadd B 1.2.3.4\n", "sets:2: set B does not exist"},
		{"create A hash:foo\n", "sets:1: unsupported set type"},
		{"create A hash:ip,port\nadd A 1.2.3.4\n", "sets:2: element \"1.2.3.4\" does not fit"},
		{"create A hash:ip,port\nadd A 1.2.3.4,tcp:99999\n", "invalid port"},
		{"create A hash:ip family inet6\nadd A 1.2.3.4\n", "not IPv6"},
		{"flush A\n", "sets:1: unknown ipset command"},
	}
	for _, tc := range cases {
		if _, err := ParseIPSetSave([]byte(tc.in), "sets"); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.msg)
		}
	}
}
