package emulator

import "testing"

// scheduledBy spells out the reason for the schedulers it knows: the text must be the
// one it builds for the others.
func TestScheduledBy(t *testing.T) {
	for _, name := range []string{"rr", "wrr", "lc", "wlc", "sed", "nq", "fo", "ovf", "twos", "dh", "sh", "mh", "lblc", "lblcr", "x"} {
		if got, want := scheduledBy(name), "new connection scheduled by "+name; got != want {
			t.Errorf("scheduledBy(%q) = %q, want %q", name, got, want)
		}
	}
}
