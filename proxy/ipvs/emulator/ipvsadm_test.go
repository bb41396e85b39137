package emulator

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/netfilter"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ipvs")

const testdataDir = "../../../testdata/ipvs"

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(testdataDir, name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdataDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCommandTable(t *testing.T) {
	for i, row := range cmdOpts {
		if len(row) != numOpts {
			t.Errorf("cmdOpts[%d] (%s) has %d columns, want %d", i, Op(i+1), len(row), numOpts)
		}
	}
}

func TestParseCommandDefaults(t *testing.T) {
	cases := []struct {
		line string
		want string // the rule the command produces, as -Sn prints it
	}{
		{"-A -t 10.0.0.1:80", "-A -t 10.0.0.1:80 -s wlc"},
		{"--add-service --tcp-service=10.0.0.1:80 --scheduler rr --persistent", "-A -t 10.0.0.1:80 -s rr -p 300"},
		{"-At 10.0.0.1:80 -s rr -p 60 -M 255.255.0.0", "-A -t 10.0.0.1:80 -s rr -p 60 -M 255.255.0.0"},
		{"ipvsadm -A -u 10.0.0.1:domain -s sh -b sh-port,sh-fallback", "-A -u 10.0.0.1:53 -s sh -b sh-fallback,sh-port"},
		{"-A -t [fd00::1]:443 -s mh -b mh-port -p 10 -M 64", "-A -t [fd00::1]:443 -s mh -p 10 -M 64 -b mh-port"},
		{"-A -f 5 -6 -s rr", "-A -f 5 -6 -s rr"},
		{"-A -u 10.0.0.1:514 -s rr --ops -b flag-3", "-A -u 10.0.0.1:514 -s rr -o -b flag-3"},
	}
	for _, c := range cases {
		m := MustNew(Config{})
		args, _ := SplitArgs(c.line)
		if err := m.Exec(args, nil); err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		eq(t, c.line, strings.TrimSpace(m.Rules()), c.want)
	}

	// destinations: -g and weight 1 by default; DR and TUN take the service port;
	// -e without -w sets weight 1 again; -E without -s sets wlc again
	m := MustNew(Config{})
	for _, l := range []string{
		"-A -t 10.0.0.1:80 -s rr",
		"-a -t 10.0.0.1:80 -r 10.1.0.1",
		"-a -t 10.0.0.1:80 -r 10.1.0.2:8080",
		"-a -t 10.0.0.1:80 -r 10.1.0.3:8080 -m -w 5 -x 10 -y 2",
		"--add-server -t 10.0.0.1:80 --real-server 10.1.0.4:8080 --ipip --weight=0",
		"-e -t 10.0.0.1:80 -r 10.1.0.3:8080 -m",
		"-E -t 10.0.0.1:80",
	} {
		if err := m.Exec(strings.Fields(l), nil); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
	}
	eq(t, "defaults", m.Rules(), `-A -t 10.0.0.1:80 -s wlc
-a -t 10.0.0.1:80 -r 10.1.0.1:80 -g -w 1
-a -t 10.0.0.1:80 -r 10.1.0.2:80 -g -w 1
-a -t 10.0.0.1:80 -r 10.1.0.3:8080 -m -w 1
-a -t 10.0.0.1:80 -r 10.1.0.4:80 -i -w 0 --tun-type ipip
`)
}

func TestParseCommandErrors(t *testing.T) {
	cases := []struct{ line, want string }{
		{"", "no command"},
		{"-t 10.0.0.1:80 -A", "-t: the first option must be a command"},
		{"-A -D -t 10.0.0.1:80", "multiple commands specified"},
		{"-A -s rr", "You need to supply the 'service-address' option for the 'add-service' command"},
		{"-A -t 10.0.0.1:80 -w 3", "Illegal 'weight' option with the 'add-service' command"},
		{"-a -t 10.0.0.1:80", "You need to supply the 'real-server' option for the 'add-server' command"},
		{"-a -t 10.0.0.1:80 -r 10.1.0.1 -w 70000", "-w 70000: illegal weight specified"},
		{"-a -t 10.0.0.1:80 -r 10.1.0.1 -w -1", "-w -1: illegal weight specified"},
		{"-a -t 10.0.0.1:80 -r 10.1.0.1 -x lots", "-x lots: illegal u_threshold specified"},
		{"-A -t 10.0.0.1:80 -p 0", "-p 0: invalid timeout value `0' specified"},
		{"-A -t 10.0.0.1:80 -M 300.0.0.0", "-M 300.0.0.0: illegal virtual server persistent mask specified"},
		{"-A -t [fd00::1]:80 -M 129", "-M 129: illegal ipv6 netmask specified"},
		{"-A -t 10.0.0.1:99999", "-t 10.0.0.1:99999: illegal virtual server address[:port] specified"},
		{"-A -t 80", "-t 80: illegal virtual server address[:port] specified"},
		{"-A -t some.host.example:80", "illegal virtual server address[:port] specified"},
		{"-A -f 0", "-f 0: invalid fwmark value `0' specified"},
		{"-A -6 -f 5", "-6 used before -f"},
		{"-A -t 10.0.0.1:80 -s rr -b sh-port", "-b sh-port: incompatible scheduler flag `sh-port' (scheduler rr)"},
		{"-A -t 10.0.0.1:80 -b bogus", "-b bogus: invalid scheduler flag `bogus'"},
		{"-A -t 10.0.0.1:80 -t 10.0.0.2:80", "multiple 'service-address' options specified"},
		{"-A -t 10.0.0.1:80 -o", "One-Packet Scheduling is only for UDP virtual services"},
		{"-A -t 10.0.0.1:80 --pe sip", "--pe sip: persistence engines are not modelled"},
		{"-a -t 10.0.0.1:80 -r [fd00::1]:80 -m", "Different address family is allowed only for tunneling servers"},
		{"-a -t 10.0.0.1:80 -r 10.1.0.1 -m --tun-type gue", "Tunnel options conflict with forward method"},
		{"-a -t 10.0.0.1:80 -r 10.1.0.1 -i --tun-type gue", "You need to supply the 'tun-port' option for the 'gue' tunnel type"},
		{"-L --rate", "--rate: the rate estimator is not modelled"},
		{"-L -c --thresholds", "options conflicts in the list command"},
		{"-L -c -t 10.0.0.1:80", "The option 'service-address' conflicts with the 'connection' option in the 'list' command"},
		{"--set 1 2", "--set option requires 3 timeout values"},
		{"--set 1 2 x", "--set: invalid timeout value `x' specified"},
		{"-C extra", "unexpected argument extra"},
		{"-R", "restore reads standard input"},
		{"--start-daemon master", "the sync daemon is not modelled"},
		{"-A -t 10.0.0.1:80 --bogus", "--bogus: unknown option"},
		{"-A -t", "-t: missing argument"},
	}
	for _, c := range cases {
		args, err := SplitArgs(c.line)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseCommand(args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseCommand(%q) = %v, want an error containing %q", c.line, err, c.want)
		}
	}
}

func TestApplyErrors(t *testing.T) {
	m := MustNew(Config{})
	run := func(l string) error { return m.Exec(strings.Fields(l), nil) }
	if err := run("-A -t 10.0.0.1:80 -s rr"); err != nil {
		t.Fatal(err)
	}
	before := m.Rules()
	for l, want := range map[string]string{
		"-A -t 10.0.0.1:80 -s rr":                    "already exists",
		"-A -t 10.0.0.2:80 -s fancy":                 "scheduler module ip_vs_fancy: not found",
		"-E -t 10.0.0.9:80 -s rr":                    "not found",
		"-D -t 10.0.0.9:80":                          "not found",
		"-a -t 10.0.0.9:80 -r 10.1.0.1:80 -m":        "service not defined",
		"-d -t 10.0.0.1:80 -r 10.1.0.1:80":           "not found",
		"-e -t 10.0.0.1:80 -r 10.1.0.1:80 -m":        "not found",
		"-a -t 10.0.0.1:80 -r 224.0.0.1:80 -m":       "not a unicast address",
		"-a -t 10.0.0.1:80 -r 10.1.0.1:80 -x 1 -y 2": "lower threshold 2 is higher than upper threshold 1",
		"-L -t 10.0.0.9:80":                          "no such service",
	} {
		if err := run(l); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", l, err, want)
		}
	}
	if err := run("-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m"); err != nil {
		t.Fatal(err)
	}
	if err := run("-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("duplicate destination: %v", err)
	}
	if !strings.HasPrefix(m.Rules(), before) {
		t.Error("a failed command changed the model")
	}
}

func TestSplitArgs(t *testing.T) {
	got, err := SplitArgs(`-A -t '10.0.0.1:80'  -s "r r" a\ b`)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "words", strings.Join(got, "|"), "-A|-t|10.0.0.1:80|-s|r r|a b")
	if _, err := SplitArgs(`-A "open`); err == nil {
		t.Error("unterminated quote accepted")
	}
}

// TestRestoreSn loads an ipvsadm -Sn dump and prints it back: -Sn is canonical, -Ln
// and -Ln --nosort are golden.
func TestRestoreSn(t *testing.T) {
	data := readTestdata(t, "kube-proxy.sn")
	m, f, err := LoadDump(Config{}, data, "kube-proxy.sn")
	if err != nil {
		t.Fatal(err)
	}
	if f != DumpRules {
		t.Fatalf("detected %v", f)
	}
	// ipvsadm -Sn sorts services and destinations (libipvs' comparators, whose unsigned
	// differences taken as int put 192.168/16 before 10/8); reloading it is a fixed point
	golden(t, "kube-proxy.sn.Sn.golden", m.Rules())
	again, _, err := LoadDump(Config{}, []byte(m.Rules()), "again")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "-Sn fixed point", again.Rules(), m.Rules())
	golden(t, "kube-proxy.sn.Ln.golden", m.Listing(false))
	golden(t, "kube-proxy.sn.Ln-nosort.golden", m.Listing(true))
	var b bytes.Buffer
	for _, l := range []string{"-L -n --thresholds", "-L -n --persistent-conn", "-L -n --tun-info", "-L -n -t 10.96.45.7:80", "-L --timeout"} {
		b.WriteString("# ipvsadm " + l + "\n")
		if err := m.Exec(strings.Fields(l), &b); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
	}
	golden(t, "kube-proxy.sn.list-variants.golden", b.String())

	// the listing loads back to the same model
	m2, f2, err := LoadDump(Config{}, []byte(m.Listing(false)), "listing")
	if err != nil {
		t.Fatal(err)
	}
	if f2 != DumpListing {
		t.Fatalf("detected %v", f2)
	}
	eq(t, "-Ln round trip", m2.Listing(false), m.Listing(false))
	eq(t, "-Ln -> -Sn", m2.Rules(), m.Rules())
}

// TestRestoreLn loads a listing captured from a node: counters become the destinations'
// state, and the printed order becomes the list order.
func TestRestoreLn(t *testing.T) {
	data := readTestdata(t, "node.ln")
	m, f, err := LoadDump(Config{}, data, "node.ln")
	if err != nil {
		t.Fatal(err)
	}
	if f != DumpListing {
		t.Fatalf("detected %v", f)
	}
	eq(t, "-Ln round trip", m.Listing(false), string(data))
	eq(t, "-Ln --nosort is the printed order", m.Listing(true), string(data))
	golden(t, "node.ln.Sn.golden", m.Rules())
	tm := &testModel{Model: m, t: t}
	eq(t, "counters", tm.counters("TCP 10.96.45.7:80", "10.244.2.9:8080"), "3/7/0")
	// rr starts at the head: the first printed destination
	d := tm.pkt(netfilter.ProtoTCP, "192.0.2.1:1", "10.96.0.10:53", netfilter.TCPSyn)
	eq(t, "first rr pick", d.Dest.String(), "10.244.0.3:53")
}

func TestLoadDumpErrors(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"bad option", "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1 -w x\n", "f:2: -w x: illegal weight specified"},
		{"kernel refusal", "-A -t 10.0.0.1:80 -s rr\n\n-A -t 10.0.0.1:80 -s rr\n", "f:3: -A -t 10.0.0.1:80 -s rr: virtual service TCP 10.0.0.1:80: already exists"},
		{"listing in a dump", "-A -t 10.0.0.1:80 -s rr\n-Ln\n", "f:2: list: not a rule"},
		{"dest before service", "IP Virtual Server version 1.2.1 (size=4096)\n  -> 10.1.0.1:80 Masq 1 0 0\n", "f:2: real server line before any virtual service"},
		{"stats listing", "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes\n", "f:2: only the default ipvsadm -Ln layout"},
		{"bad forward", "TCP  10.0.0.1:80 rr\n  -> 10.1.0.1:80 Bounce 1 0 0\n", `f:2: forward "Bounce"`},
		{"bad counter", "TCP  10.0.0.1:80 rr\n  -> 10.1.0.1:80 Masq 1 x 0\n", `f:2: ActiveConn "x": not a count`},
		{"names", "TCP  kubernetes.default:https rr\n", "f:1: TCP kubernetes.default:https: not an address:port"},
		{"junk", "TCP  10.0.0.1:80 rr\nhello world\n", `f:2: "hello": not a virtual service line`},
		{"unknown scheduler", "TCP  10.0.0.1:80 nope\n", "f:1: scheduler module ip_vs_nope: not found"},
	}
	for _, c := range cases {
		_, _, err := LoadDump(Config{}, []byte(c.text), "f")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestConnListingGolden(t *testing.T) {
	tm := newTM(t, Config{}, "-A -t 10.96.0.10:80 -s rr -p 600", "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m", "-a -t 10.96.0.10:80 -r 10.244.2.5:8080 -m",
		"-A -u 10.96.0.10:53 -s rr", "-a -u 10.96.0.10:53 -r 10.244.1.6:53 -m",
		"-A -t [fd00::10]:80 -s rr", "-a -t [fd00::10]:80 -r [fd00::1:5]:8080 -m")
	tm.do("conn tcp 10.1.0.9:40000 10.96.0.10:80", "sleep 65", "conn tcp 10.1.0.9:40001 10.96.0.10:80 close",
		"conn udp 10.1.0.9:5353 10.96.0.10:53", "conn tcp [fd00:1::9]:40000 [fd00::10]:80", "sleep 1.5")
	tm.pkt(netfilter.ProtoTCP, "10.1.0.10:40000", "10.96.0.10:80", netfilter.TCPSyn)
	golden(t, "conns.Lnc.golden", tm.ConnListing())
}
