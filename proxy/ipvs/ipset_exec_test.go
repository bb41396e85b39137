package ipvs

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestExecIPSetsCommands(t *testing.T) {
	var calls []string
	e := &ExecIPSets{Netns: "n1", run: func(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
		calls = append(calls, name+" "+strings.Join(args, " ")+" <"+string(stdin)+">")
		if args[len(args)-1] == "save" {
			return []byte("create A hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1\n"), nil
		}
		return nil, errors.New("exit status 1: ipset v7.17: Error in line 2: Element cannot be added to the set: it's already added")
	}}
	out, err := e.SaveIPSets(context.Background())
	if err != nil || !strings.HasPrefix(string(out), "create A hash:ip") {
		t.Errorf("save: %q %v", out, err)
	}
	err = e.RestoreIPSets(context.Background(), []byte("create A hash:ip -exist\nadd A 1.1.1.1\n"))
	if err == nil || !strings.Contains(err.Error(), "ip netns exec n1 ipset restore: exit status 1: ipset v7.17: Error in line 2") {
		t.Errorf("restore error: %v", err)
	}
	want := []string{"ip netns exec n1 ipset save <>", "ip netns exec n1 ipset restore <create A hash:ip -exist\nadd A 1.1.1.1\n>"}
	if strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("commands:\n%q\nwant\n%q", calls, want)
	}
	host := &ExecIPSets{Netns: HostNamespace}
	if name, args := host.command("save"); name != "ipset" || strings.Join(args, " ") != "save" {
		t.Errorf("host command: %s %v", name, args)
	}
	// No namespace: an error, and nothing runs (issue 23).
	calls = nil
	none := &ExecIPSets{run: e.run}
	if _, err := none.SaveIPSets(context.Background()); err == nil || !strings.Contains(err.Error(), "HostNamespace") || len(calls) != 0 {
		t.Errorf("no Netns: %v, calls %q; want a refusal naming HostNamespace", err, calls)
	}
	if err := none.RestoreIPSets(context.Background(), []byte("flush\n")); err == nil || len(calls) != 0 {
		t.Errorf("no Netns restore: %v, calls %q", err, calls)
	}
	// What the kernel prints back parses as the proxier needs it.
	saved := parseSavedSets([]byte("create N hash:ip,port,net family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x7a6c2528\nadd N 1.2.3.4,tcp:80,10.1.2.3\n"))
	if s := saved["N"]; s == nil || s.typ != "hash:ip,port,net" || !s.entries[canonicalEntry(s.typ, "1.2.3.4,tcp:80,10.1.2.3/32")] {
		t.Errorf("parsed kernel save: %+v", s)
	}
}
