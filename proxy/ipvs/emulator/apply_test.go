package emulator

import (
	"errors"
	"strings"
	"testing"

	"github.com/clusterlab/clusterlab/proxy/ipvs"
)

// An ipvsadm command given through ApplyTo (the ipvs.Interface a kernel adapter also
// implements) changes the model exactly as Apply does.
func TestApplyToMatchesApply(t *testing.T) {
	cmds := []string{
		"-A -t 10.96.0.1:80 -s wrr",
		"-a -t 10.96.0.1:80 -r 10.1.0.1:8080 -m -w 3",
		"-a -t 10.96.0.1:80 -r 10.1.0.2:8080 -m -w 1 -x 10 -y 5",
		"-e -t 10.96.0.1:80 -r 10.1.0.1:8080 -m -w 0",
		"-A -u 10.96.0.2:53 -s sh -b sh-fallback,sh-port -p 60 -M 255.255.255.0",
		"-a -u 10.96.0.2:53 -r 10.1.0.3 -m",
		"-E -t 10.96.0.1:80 -s mh -b mh-port",
		"-A -f 7 -s lblc",
		"-a -f 7 -r 10.1.0.4:80 -g",
		"-d -t 10.96.0.1:80 -r 10.1.0.2:8080",
		"--set 900 120 300",
		"-D -f 7",
	}
	direct, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	via, _ := New(Config{})
	for _, line := range cmds {
		words, _ := SplitArgs(line)
		c, err := ParseCommand(words)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if err := direct.Apply(c, nil); err != nil {
			t.Fatalf("Apply %s: %v", line, err)
		}
		if err := c.ApplyTo(via); err != nil {
			t.Fatalf("ApplyTo %s: %v", line, err)
		}
		if a, b := direct.Listing(false), via.Listing(false); a != b {
			t.Fatalf("after %s:\nApply:\n%s\nApplyTo:\n%s", line, a, b)
		}
	}
	if !strings.Contains(via.Listing(false), "mh (mh-port)") {
		t.Errorf("the edit did not reach the model:\n%s", via.Listing(false))
	}
	for _, line := range []string{"-Ln", "-Sn", "-Z"} {
		words, _ := SplitArgs(line)
		c, _ := ParseCommand(words)
		if err := c.ApplyTo(via); !errors.Is(err, ErrUnsupported) {
			t.Errorf("ApplyTo %s: %v, want ErrUnsupported", line, err)
		}
	}
	words, _ := SplitArgs("-A -t 10.96.0.1:80 -s rr")
	c, _ := ParseCommand(words)
	if err := c.ApplyTo(via); !ipvs.IsExist(err) {
		t.Errorf("adding an existing service: %v", err)
	}
}

// Found by the VM differential (TestSchedulersAgainstKernelVM, rr): Debian's 6.1 kernel
// marks a real server OVERLOADed as soon as an edit gives it an upper threshold its
// connections already reach, so rr skips it at once; kernels without that fix
// (LegacyThresholdEdit) keep sending it connections until one binds to it.
func TestThresholdEditUpdatesOverload(t *testing.T) {
	setup := []string{
		"-A -t 10.96.0.1:80 -s rr",
		"-a -t 10.96.0.1:80 -r 10.1.0.1:8080 -m",
		"-a -t 10.96.0.1:80 -r 10.1.0.2:8080 -m",
		"conn tcp 10.0.0.1:40001 10.96.0.1:80", // 10.1.0.2 (the head)
		"conn tcp 10.0.0.1:40002 10.96.0.1:80", // 10.1.0.1
		"conn tcp 10.0.0.1:40003 10.96.0.1:80", // 10.1.0.2
		"conn tcp 10.0.0.1:40004 10.96.0.1:80", // 10.1.0.1: two connections
		"-e -t 10.96.0.1:80 -r 10.1.0.1:8080 -m -x 2",
		"conn tcp 10.0.0.1:40005 10.96.0.1:80", // 10.1.0.2
	}
	next := "conn tcp 10.0.0.1:40006 10.96.0.1:80" // 10.1.0.1's turn
	for _, c := range []struct {
		legacy bool
		want   string
	}{{false, "10.1.0.2:8080"}, {true, "10.1.0.1:8080"}} {
		m, err := New(Config{LegacyThresholdEdit: c.legacy})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Run([]byte(strings.Join(setup, "\n")), "setup", NewManualClock()); err != nil {
			t.Fatal(err)
		}
		rep, err := m.Run([]byte(next), "next", NewManualClock())
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.Results[0].Destination; got != c.want {
			t.Errorf("LegacyThresholdEdit=%v: %s, want %s", c.legacy, got, c.want)
		}
	}
	// Raising the threshold above the connections clears it again; lowering the lower
	// threshold alone keeps it while the connections are between the two.
	m, _ := New(Config{})
	clock := NewManualClock()
	if _, err := m.Run([]byte(strings.Join(append(setup, "-e -t 10.96.0.1:80 -r 10.1.0.1:8080 -m -x 3 -y 1"), "\n")), "s", clock); err != nil {
		t.Fatal(err)
	}
	rep, _ := m.Run([]byte(next), "next", clock)
	if got := rep.Results[0].Destination; got != "10.1.0.2:8080" {
		t.Errorf("-x 3 -y 1 with two connections (between the thresholds, flag kept): %s, want 10.1.0.2:8080", got)
	}
	m, _ = New(Config{})
	clock = NewManualClock()
	if _, err := m.Run([]byte(strings.Join(append(setup, "-e -t 10.96.0.1:80 -r 10.1.0.1:8080 -m -x 4"), "\n")), "s", clock); err != nil {
		t.Fatal(err)
	}
	rep, _ = m.Run([]byte(next), "next", clock)
	if got := rep.Results[0].Destination; got != "10.1.0.1:8080" {
		t.Errorf("-x 4 with two connections (below 75%%, cleared): %s, want 10.1.0.1:8080", got)
	}
}
