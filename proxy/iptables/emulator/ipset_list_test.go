package emulator

import (
	"slices"
	"strings"
	"testing"
)

// ipsetList is `ipset list` output of an IPVS-mode node (kube-proxy's sets), with the
// per-member options a list shows.
const ipsetList = `Name: KUBE-CLUSTER-IP
Type: hash:ip,port
Revision: 6
Header: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x2f7e7b14
Size in memory: 504
References: 2
Number of entries: 2
Members:
10.96.0.1,tcp:443
10.96.0.10,udp:53

Name: KUBE-LOOP-BACK
Type: hash:ip,port,ip
Revision: 6
Header: family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x96b9e4cf
Size in memory: 360
References: 1
Number of entries: 1
Members:
10.244.1.5,tcp:8080,10.244.1.5

Name: KUBE-NODE-PORT-TCP
Type: bitmap:port
Revision: 3
Header: range 0-65535
Size in memory: 8264
References: 1
Number of entries: 1
Members:
30080
`

const ipsetSave = `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x2f7e7b14
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x96b9e4cf
add KUBE-LOOP-BACK 10.244.1.5,tcp:8080,10.244.1.5
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
`

// TestParseIPSetList: `ipset list` output gives the same sets as the equivalent
// `ipset save` output (ParseIPSets tells the two apart), and the walk finds members in
// them; errors name the line of the list.
func TestParseIPSetList(t *testing.T) {
	fromList, err := ParseIPSets([]byte(ipsetList), "ipset.list")
	if err != nil {
		t.Fatal(err)
	}
	fromSave, err := ParseIPSets([]byte(ipsetSave), "ipset.save")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"KUBE-CLUSTER-IP", "KUBE-LOOP-BACK", "KUBE-NODE-PORT-TCP"} {
		a, b := fromList.Get(name), fromSave.Get(name)
		if a == nil || b == nil || a.Type != b.Type || a.Family != b.Family || !slices.Equal(a.Entries(), b.Entries()) || !slices.Equal(a.Options, b.Options) {
			t.Errorf("%s: from the list %+v, from save %+v", name, a, b)
		}
	}
	e2, err := Load([]byte("*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\n-A KUBE-SERVICES -j DROP\nCOMMIT\n"), IPv4, "x", WithIPSets(fromList))
	if err != nil {
		t.Fatal(err)
	}
	if o := walk(t, e2, WalkInput{Packet: *pkt("udp 10.244.0.2:4000 10.96.0.10:53")}).Outcomes[0]; o.Verdict != "ACCEPT" || len(o.Assumptions) != 0 {
		t.Errorf("a member of the listed set: %s %v", o.summary(), o.Assumptions)
	}

	for _, tc := range []struct{ in, want string }{
		{"Name: A\nType: hash:ip\nHeader: family inet\nMembers:\n10.0.0.1\nnot-an-ip\n", "l:6: "},
		{"Name: A\nType: hash:nope\nHeader: family inet\n", "l:3: unsupported set type"},
		{"Name: A\nbogus line\n", `l:2: want a "Key: value" header line`},
		{"Name: A\nType: hash:ip\nColour: blue\n", `l:3: unknown header "Colour"`},
		{"Name: A\nRevision: 1\n\nName: B\nType: hash:ip\nHeader: family inet\n", "l:1: set A has no Type and Header lines"},
	} {
		_, err := ParseIPSetList([]byte(tc.in), "l")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}
