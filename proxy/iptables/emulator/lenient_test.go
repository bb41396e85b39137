package emulator

import (
	"strconv"
	"strings"
	"testing"
)

const garbledDump = `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-X - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 80 -j KUBE-SVC-X
-A KUBE-SERVICES -d 10.96.0.2/32 -p tcp --dpxrt 80 -j KUBE-SVC-Y
-A KUBE-SVC-X -p tcp -j DNAT --to-destination 10.244.0.5:8080
-A KUBE-SVC-Y -j DNAT --to-destination 1.2.3.4
garbage here
COMMIT
*bogus
-A X -j ACCEPT
COMMIT
*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -j NOSUCH
-A FORWARD -d 10.244.0.9/32 -j DROP
`

// TestLenientLoad: a garbled dump is refused whole by default; with Lenient the lines
// that do not load are skipped and reported with line, text and reason (a bad option,
// a rule for a chain that does not exist, a line that is no command, a table whose
// header is unknown, a jump to a missing chain, a table without COMMIT), the rest is
// loaded and traced, and an outcome whose path crossed a chain or table that lost a
// line says which lines could have changed it.
func TestLenientLoad(t *testing.T) {
	if _, err := Load([]byte(garbledDump), IPv4, "node.dump"); err == nil || !strings.Contains(err.Error(), "node.dump:7: --dpxrt") {
		t.Fatalf("strict load: %v", err)
	}
	e, err := Load([]byte(garbledDump), IPv4, "node.dump", Lenient())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sl := range e.Skipped() {
		got = append(got, strings.Join([]string{strconv.Itoa(sl.Line), sl.Table, sl.Chain, sl.Text}, "|"))
		if sl.Reason == "" || sl.File != "node.dump" {
			t.Errorf("skipped line %+v without its reason or file", sl)
		}
	}
	want := []string{
		"7|nat|KUBE-SERVICES|-A KUBE-SERVICES -d 10.96.0.2/32 -p tcp --dpxrt 80 -j KUBE-SVC-Y",
		"9|nat|KUBE-SVC-Y|-A KUBE-SVC-Y -j DNAT --to-destination 1.2.3.4",
		"10|nat||garbage here",
		"12|||*bogus",
		"13|bogus|X|-A X -j ACCEPT",
		"14|bogus||COMMIT",
		"17|filter|FORWARD|-A FORWARD -j NOSUCH",
		"19|filter||",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("skipped:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	r := walk(t, e, WalkInput{Packet: *pkt("tcp 192.168.1.9:4000 10.96.0.1:80")})
	o := r.Outcomes[0]
	if o.DNATDestination == nil || *o.DNATDestination != "10.244.0.5:8080" || o.Verdict != "ACCEPT" {
		t.Fatalf("outcome %s", o.summary())
	}
	if d := strings.Join(o.MayDiffer, ","); d != "node.dump:7,node.dump:10,node.dump:12,node.dump:17,node.dump:19" {
		t.Errorf("may differ %q", d)
	}
	if !strings.Contains(r.Text(), "may differ: its path went where lines were skipped (node.dump:7,") {
		t.Errorf("text:\n%s", r.Text())
	}
	// The rule after the skipped jump still applies.
	r = walk(t, e, WalkInput{Packet: *pkt("tcp 192.168.1.9:4000 10.244.0.9:80")})
	if o := r.Outcomes[0]; o.Verdict != "DROP" {
		t.Errorf("to 10.244.0.9: %s", o.summary())
	}
}
