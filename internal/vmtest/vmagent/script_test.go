//go:build linux

package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseLines(t *testing.T) {
	lines, err := parseLines(`# comment
-A -t 10.96.0.1:80 -s rr
conn tcp 10.0.0.1:1000 10.96.0.1:80 server-close
conn tcp 10.0.0.1:1000 10.96.0.1:80 close # a comment
conn udp 10.0.0.2:1000 10.96.0.1:53
sleep 1.5
-Ln --stats
-Lnc
-Ln
sysctl net.ipv4.vs.conn_reuse_mode=0
`)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range lines {
		kinds = append(kinds, l.kind)
	}
	if got := strings.Join(kinds, " "); got != "ipvsadm conn conn conn sleep stats conns list sysctl" {
		t.Errorf("kinds %q", got)
	}
	if !lines[1].serverClose || lines[1].close || !lines[2].close || lines[4].dur != 1500*time.Millisecond || lines[8].key != "conn_reuse_mode" {
		t.Errorf("parsed %+v", lines)
	}
	for _, bad := range []string{
		"conn udp 10.0.0.1:1 10.96.0.1:53 server-close",
		"conn tcp 10.0.0.1:1 10.96.0.1:80 close server-close",
		"sleep soon", "sleep 61", "sleep", "sched tcp 10.0.0.1:1 10.96.0.1:80",
	} {
		_, err := parseLines("-A -t 10.96.0.1:80\n" + bad)
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v, want an error naming line 2", bad, err)
		}
	}
}

// FuzzParseLines: any script is parsed or refused with an error naming its line.
func FuzzParseLines(f *testing.F) {
	for _, s := range []string{"conn tcp 10.0.0.1:1 10.96.0.1:80 server-close", "sleep 0.1\n-Ln --stats", "-A -t 1.2.3.4:5", "sysctl a=b", "\"", "conn udp [::1]:1 [::2]:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := parseLines(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		for _, l := range lines {
			if l.kind == "" || l.no < 1 {
				t.Fatalf("line %+v", l)
			}
		}
	})
}
