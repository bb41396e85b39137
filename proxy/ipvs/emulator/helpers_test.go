package emulator

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// testModel is a model on a manual clock, driven by script lines.
type testModel struct {
	*Model
	t     *testing.T
	clock *ManualClock
	port  uint16
}

func newTM(t *testing.T, cfg Config, script ...string) *testModel {
	t.Helper()
	clock := NewManualClock()
	cfg.Clock = clock
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tm := &testModel{Model: m, t: t, clock: clock, port: 30000}
	tm.do(script...)
	return tm
}

// do runs script lines (ipvsadm commands, set, sleep, sysctl, conn, sched).
func (tm *testModel) do(lines ...string) *ScriptReport {
	tm.t.Helper()
	rep, err := tm.Run([]byte(strings.Join(lines, "\n")), "test", tm.clock)
	if err != nil {
		tm.t.Fatal(err)
	}
	return rep
}

// letters name the test destinations: A is 10.1.0.1, B 10.1.0.2, ...
func letter(ap netip.AddrPort) string {
	if !ap.IsValid() {
		return "-"
	}
	a := ap.Addr()
	if a.Is4() {
		b := a.As4()
		if b[0] == 10 && b[1] == 1 && b[2] == 0 && b[3] >= 1 && b[3] <= 26 {
			return string(rune('A' + b[3] - 1))
		}
	}
	if a.Is6() {
		b := a.As16()
		if b[0] == 0xfd && b[15] >= 1 && b[15] <= 26 {
			return string(rune('A' + b[15] - 1))
		}
	}
	return ap.String()
}

// syn sends a SYN from a fresh client port and returns the destination letter ("-" for
// none).
func (tm *testModel) syn(client, vip string) string {
	tm.t.Helper()
	tm.port++
	d := tm.In(Packet{Protocol: netfilter.ProtoTCP, Src: netip.AddrPortFrom(netip.MustParseAddr(client), tm.port),
		Dst: netip.MustParseAddrPort(vip), TCPFlags: netfilter.TCPSyn})
	if d.Verdict != VerdictForward {
		return "-"
	}
	return letter(d.Dest)
}

// picks sends n SYNs from one client and returns the letters, space separated.
func (tm *testModel) picks(n int, vip string) string {
	tm.t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, tm.syn("192.0.2.1", vip))
	}
	return strings.Join(out, " ")
}

// ask is a dry-run Schedule for a TCP SYN from client.
func (tm *testModel) ask(client, vip string, mark uint32) string {
	tm.t.Helper()
	d := tm.Schedule(Packet{Protocol: netfilter.ProtoTCP, Src: netip.MustParseAddrPort(client), Dst: netip.MustParseAddrPort(vip),
		TCPFlags: netfilter.TCPSyn, Mark: mark})
	if d.Verdict != VerdictForward {
		return "-"
	}
	return letter(d.Dest)
}

// dest returns the destination's counters: "active/inactive/persist".
func (tm *testModel) counters(svc, rs string) string {
	tm.t.Helper()
	for _, s := range tm.Snapshot().Services {
		if s.Service != svc {
			continue
		}
		for _, d := range s.Destinations {
			if d.Address == rs {
				return fmt.Sprintf("%d/%d/%d", d.Active, d.Inactive, d.Persistent)
			}
		}
	}
	tm.t.Fatalf("no destination %s in %s", rs, svc)
	return ""
}

func (tm *testModel) listOrder(svc string) string {
	tm.t.Helper()
	for _, s := range tm.Snapshot().Services {
		if s.Service == svc {
			var out []string
			for _, d := range s.Destinations {
				out = append(out, letter(netip.MustParseAddrPort(d.Address)))
			}
			return strings.Join(out, " ")
		}
	}
	tm.t.Fatalf("no service %s", svc)
	return ""
}

func (tm *testModel) advance(d time.Duration) { tm.clock.Advance(d) }

func eq(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got: %s\nwant: %s", what, got, want)
	}
}

func readFileIfExists(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(testdataDir, name))
}

func asLineError(err error, le **LineError) bool { return errors.As(err, le) }
