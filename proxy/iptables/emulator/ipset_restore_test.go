package emulator

import (
	"context"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

func TestIPSetRestore(t *testing.T) {
	ctx := context.Background()
	e := New(IPv4)
	first := `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 -exist
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 -exist
create KUBE-LB-SRC hash:ip,port,net family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443 -exist
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
add KUBE-NODE-PORT-TCP 30080
add KUBE-LB-SRC 1.2.3.4,tcp:80,10.0.0.0/8
`
	if err := e.RestoreIPSets(ctx, []byte(first)); err != nil {
		t.Fatal(err)
	}
	want := `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
create KUBE-LB-SRC hash:ip,port,net family inet hashsize 1024 maxelem 65536
add KUBE-LB-SRC 1.2.3.4,tcp:80,10.0.0.0/8
`
	save := func() string {
		b, err := e.SaveIPSets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := save(); got != want {
		t.Fatalf("after the first restore:\n%s", lineDiff(want, got))
	}
	snapshot := e.IPSets()

	// A rule using the sets: the set matches see the restored members.
	rules := `*filter
:INPUT ACCEPT [0:0]
-A INPUT -m set --match-set KUBE-CLUSTER-IP dst,dst -j DROP
-A INPUT -p tcp -m set --match-set KUBE-NODE-PORT-TCP dst -j REJECT
-A INPUT -m set --match-set KUBE-LB-SRC dst,dst,src -j ACCEPT
COMMIT
`
	if err := e.RestoreText([]byte(rules), RestoreOptions{File: "rules"}); err != nil {
		t.Fatal(err)
	}
	verdict := func(p string) string {
		res := e.EvalTable(NewStaticEnv(1), TableFilter, netfilter.Input, pkt(p), nil)
		if res.Decision.ByPolicy() {
			return "policy"
		}
		return res.Verdict.String()
	}
	for p, want := range map[string]string{
		"tcp 10.244.0.5:999 10.96.0.1:443":     "DROP",
		"udp 10.244.0.5:999 10.96.0.10:53":     "DROP",
		"tcp 10.244.0.5:999 10.96.0.10:53":     "policy",
		"tcp 203.0.113.9:999 172.18.0.2:30080": "REJECT",
		"tcp 10.1.2.3:999 1.2.3.4:80":          "ACCEPT",
		"tcp 11.1.2.3:999 1.2.3.4:80":          "policy",
	} {
		if got := verdict(p); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}

	// Second restore: a diff, as kube-proxy syncs it.
	second := `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 -exist
del KUBE-CLUSTER-IP 10.96.0.10,udp:53
add KUBE-CLUSTER-IP 10.96.0.20,tcp:80
-exist
del KUBE-NODE-PORT-TCP 31000
flush KUBE-LB-SRC
`
	if err := e.RestoreIPSets(ctx, []byte(second)); err != nil {
		t.Fatal(err)
	}
	want2 := `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
add KUBE-CLUSTER-IP 10.96.0.20,tcp:80
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
create KUBE-LB-SRC hash:ip,port,net family inet hashsize 1024 maxelem 65536
`
	if got := save(); got != want2 {
		t.Fatalf("after the second restore:\n%s", lineDiff(want2, got))
	}
	if verdict("udp 10.244.0.5:999 10.96.0.10:53") != "policy" || verdict("tcp 10.1.2.3:999 1.2.3.4:80") != "policy" {
		t.Error("deleted and flushed members still match")
	}
	// The earlier snapshot is untouched (restores copy on write).
	if got := strings.Join(snapshot.Get("KUBE-CLUSTER-IP").Entries(), " "); got != "10.96.0.1,tcp:443 10.96.0.10,udp:53" {
		t.Errorf("snapshot changed: %s", got)
	}

	// Errors: nothing applies, the line is named.
	before := save()
	cases := []struct{ in, msg string }{
		{"add KUBE-CLUSTER-IP 10.96.0.30,tcp:80\nadd KUBE-CLUSTER-IP 10.96.0.1,tcp:443\n", "ipset-restore#4:2: add KUBE-CLUSTER-IP 10.96.0.1,tcp:443: element cannot be added to the set: it's already added"},
		{"del KUBE-CLUSTER-IP 10.96.0.99,tcp:80\n", ":1: del KUBE-CLUSTER-IP 10.96.0.99,tcp:80: element cannot be deleted"},
		{"create KUBE-CLUSTER-IP hash:ip\n", "set with the same name already exists"},
		{"create KUBE-CLUSTER-IP hash:ip -exist\n", "set with the same name already exists"},
		{"destroy KUBE-CLUSTER-IP\n", "in use by a kernel component"},
		{"add NOPE 1.2.3.4\n", "does not exist: NOPE"},
		{"add KUBE-CLUSTER-IP 10.96.0.1\n", "does not fit set type"},
		{"frobnicate X\n", "unknown ipset command"},
		{"create X hash:nope\n", "unsupported set type"},
		{"create KUBE-A-VERY-LONG-SET-NAME-OVER-31 hash:ip\n", "at most 31 characters"},
	}
	for _, tc := range cases {
		err := e.RestoreIPSets(ctx, []byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.msg)
		}
		if got := save(); got != before {
			t.Fatalf("%q was half-applied:\n%s", tc.in, lineDiff(before, got))
		}
	}
	// An unused set can be destroyed, renamed, swapped.
	if err := e.RestoreIPSets(ctx, []byte("create A hash:ip\ncreate B hash:ip\nadd A 1.1.1.1\nswap A B\nrename A C\ndestroy C\n")); err != nil {
		t.Fatal(err)
	}
	if s := e.IPSets(); s.Get("A") != nil || s.Get("C") != nil || strings.Join(s.Get("B").Entries(), " ") != "1.1.1.1" {
		t.Errorf("after swap/rename/destroy: %s", save())
	}
}

// bitmap:port sets match packets of the emulator's family.
func TestIPSetRestoreBitmapIPv6(t *testing.T) {
	e := New(IPv6)
	if err := e.RestoreIPSets(context.Background(), []byte("create KUBE-6-NODE-PORT-TCP bitmap:port range 0-65535\nadd KUBE-6-NODE-PORT-TCP 30080\n")); err != nil {
		t.Fatal(err)
	}
	if err := e.RestoreText([]byte("*filter\n-A INPUT -p tcp -m set --match-set KUBE-6-NODE-PORT-TCP dst -j DROP\nCOMMIT\n"), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	res := e.EvalTable(NewStaticEnv(1), TableFilter, netfilter.Input, pkt("tcp [2001:db8::9]:999 [2001:db8::1]:30080"), nil)
	if res.Verdict != Drop {
		t.Errorf("IPv6 packet to a NodePort in a bitmap:port set: %s", res.Verdict)
	}
}

func FuzzIPSetRestore(f *testing.F) {
	f.Add([]byte("create A hash:ip,port family inet\nadd A 1.2.3.4,tcp:80\ndel A 1.2.3.4,tcp:80 -exist\nflush\n"))
	f.Add([]byte("-exist\ncreate B bitmap:port range 0-65535\nadd B 80\nswap B B\nrename B C\ndestroy\n"))
	f.Add([]byte("create C hash:ip,port,net family inet6\nadd C 2001:db8::1,udp:53,2001:db8::/32 nomatch\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := NewIPSets().Restore(data, "fuzz", IPv4, nil)
		if err != nil {
			return
		}
		// What applied saves, and the save loads back to the same text.
		out := s.Save()
		s2, err := ParseIPSetSave(out, "saved")
		if err != nil {
			t.Fatalf("saved sets do not parse: %v\n%s", err, out)
		}
		if string(s2.Save()) != string(out) {
			t.Fatalf("not stable:\n%s", lineDiff(string(out), string(s2.Save())))
		}
	})
}
