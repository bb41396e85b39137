package emulator

import (
	"bytes"
	"sort"
	"strings"
	"testing"
	"time"
)

func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		"-A -t 10.0.0.1:80 -s rr -p 60 -M 255.255.255.0",
		"-a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 3 -x 10 -y 2",
		"-Ln --nosort", "-Lnc", "-Sn", "--set 900 120 300", "-E -f 5 -6 -s mh -b mh-port",
		"--add-server --udp-service=[fd00::1]:53 --real-server [fd00::2]:53 --ipip --tun-type gue --tun-port 6080",
		"-D -t 10.0.0.1:80", "-e -t 10.0.0.1:80 -r 10.1.0.1:8080 -g -w 0", "-C", "-Z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args, err := SplitArgs(line)
		if err != nil {
			return
		}
		c, err := ParseCommand(args)
		if err != nil {
			return
		}
		m := MustNew(Config{})
		_ = m.Exec([]string{"-A", "-t", "10.0.0.1:80", "-s", "rr"}, nil)
		_ = m.Exec([]string{"-a", "-t", "10.0.0.1:80", "-r", "10.1.0.1:8080", "-m"}, nil)
		var out bytes.Buffer
		_ = m.Apply(c, &out)
		_ = m.Listing(false)
		_ = m.Rules()
	})
}

func FuzzLoadDump(f *testing.F) {
	for _, name := range []string{"kube-proxy.sn", "node.ln"} {
		b, err := readFileIfExists(name)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("TCP  10.0.0.1:80 rr persistent 60 mask 255.255.255.0\n  -> 10.1.0.1:80 Masq 1 2 3\n"))
	f.Add([]byte("FWM  7 IPv6 sh (sh-fallback)\n  -> [fd00::1]:0 Route 0 0 0\n"))
	f.Add([]byte("-A -u 10.0.0.1:53 -s wrr -o\n-a -u 10.0.0.1:53 -r 10.1.0.1:53 -m -w 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, err := LoadDump(Config{}, data, "fuzz")
		if err != nil {
			var le *LineError
			if !asLineError(err, &le) {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		rules := m.Rules()
		m2, _, err := LoadDump(Config{}, []byte(rules), "rules")
		if err != nil {
			t.Fatalf("reloading our own -Sn output: %v\n%s", err, rules)
		}
		// the same rules; their order may differ where ipvsadm's comparator is not a
		// total order (destinations are sorted from list order, as ipvsadm sorts them)
		if got := m2.Rules(); sortedLines(got) != sortedLines(rules) {
			t.Fatalf("-Sn reload changed the rules:\n%s\n---\n%s", rules, got)
		}
		listing := m.Listing(false)
		m3, _, err := LoadDump(Config{}, []byte(listing), "listing")
		if err != nil {
			t.Fatalf("reloading our own -Ln output: %v\n%s", err, listing)
		}
		if got := m3.Listing(false); sortedLines(got) != sortedLines(listing) {
			t.Fatalf("-Ln round trip:\n%s\n---\n%s", listing, got)
		}
	})
}

func FuzzScript(f *testing.F) {
	f.Add([]byte("-A -t 10.0.0.1:80 -s rr -p 10\n-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m\nconn tcp 10.2.0.1:1000 10.0.0.1:80\nsleep 5\nconn tcp 10.2.0.1:1000 10.0.0.1:80 close\nsched tcp 10.2.0.2:1 10.0.0.1:80\n-Lnc\n"))
	f.Add([]byte("-A -f 3 -s lblcr\n-a -f 3 -r 10.1.0.1:0 -g\nconn udp 10.2.0.1:53 10.9.9.9:53 mark=3\nset -f 3 -r 10.1.0.1:0 active=4 overloaded=yes\nsysctl expire_nodest_conn=1\n-d -f 3 -r 10.1.0.1:0\nadvance 2m\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parsed, err := parseScript(data, "fuzz")
		if err != nil || len(parsed) > 100 {
			return
		}
		var total time.Duration
		for _, l := range parsed {
			total += l.dur
		}
		if total > 48*time.Hour {
			return
		}
		rep, err := RunScript(ScriptInput{Script: data, ScriptName: "fuzz"})
		if err != nil {
			var le *LineError
			if !asLineError(err, &le) {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), `"results"`) {
			t.Fatal("no results in the JSON report")
		}
	})
}

func sortedLines(s string) string {
	l := strings.Split(s, "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}
