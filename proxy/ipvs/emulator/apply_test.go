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
