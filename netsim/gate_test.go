package netsim

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestGateStates(t *testing.T) {
	var nilGate *Gate
	if idle, wake, _ := nilGate.State(); !idle || wake != nil {
		t.Fatalf("nil gate: idle %v wake %v, want idle and no channel", idle, wake)
	}
	nilGate.Add(1) // must not panic

	g := NewGate()
	idle, wake, gen0 := g.State()
	if !idle || !closed(wake) {
		t.Fatalf("new gate: idle %v, wake closed %v; want idle with a closed channel", idle, closed(wake))
	}
	g.Add(1)
	idle, wake, gen1 := g.State()
	if idle || closed(wake) {
		t.Fatalf("one busy: idle %v, wake closed %v; want busy with an open channel", idle, closed(wake))
	}
	if gen1 == gen0 {
		t.Fatal("Add did not change the generation")
	}
	g.Add(1)
	g.Add(-1)
	idle, wake2, gen2 := g.State()
	if idle || closed(wake) || wake2 != wake {
		t.Fatalf("still one busy: idle %v, wake closed %v, same channel %v", idle, closed(wake), wake2 == wake)
	}
	if gen2 == gen1 {
		t.Fatal("a goroutine that woke and slept again between two looks left the generation unchanged")
	}
	g.Add(-1)
	if !closed(wake) {
		t.Fatal("the wake channel stayed open when the last busy goroutine left")
	}
	if idle, _, _ := g.State(); !idle {
		t.Fatal("gate not idle after every Add was undone")
	}
	g.Add(1)
	if _, wake3, _ := g.State(); closed(wake3) || wake3 == wake {
		t.Fatal("busy again: want a fresh open channel")
	}
}

// TestGateWakesWaiter: a loop that waits for the gate (as scenario.DialWhoami and
// dns.RunOnClock do before moving the clock) is released exactly when the busy
// goroutine blocks.
func TestGateWakesWaiter(t *testing.T) {
	g := NewGate()
	g.Add(1)
	_, wake, _ := g.State()
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		<-release
		g.Add(-1) // the program now waits on the network
		close(done)
	}()
	if closed(wake) {
		t.Fatal("woken before the program blocked")
	}
	close(release)
	<-wake
	<-done
	if idle, _, _ := g.State(); !idle {
		t.Fatal("not idle after wake")
	}
}
