package proptest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
	"github.com/clusterlab/clusterlab/netsim"
)

// Dialed is what a real connection saw: the whoami server's answer (which pod, which
// source address it saw), or why there was none.
type Dialed struct {
	// Result is netsim.ResultConnected (TCP) or ResultReplied (UDP) when a server
	// answered, ResultRefused, or ResultDropped (no answer within the budget).
	Result string
	// Pod is the pod that answered ("" for a node's host network).
	Pod, Node string
	// Seen is the source address the server saw.
	Seen netip.Addr
	// Reason says why nothing answered.
	Reason string
}

func (d Dialed) String() string {
	if d.Pod != "" || d.Node != "" {
		who := d.Pod
		if who == "" {
			who = "node " + d.Node
		}
		return fmt.Sprintf("%s by %s (saw %s)", d.Result, who, d.Seen)
	}
	return d.Result + " (" + d.Reason + ")"
}

// netOf returns the network of a probe source.
func (w *World) netOf(from string) (*netsim.Net, error) {
	kind, name, _ := strings.Cut(from, ":")
	switch kind {
	case "pod":
		ns, n := splitKey(name)
		if p := w.Cluster.Pod(ns, n); p != nil {
			return p.Net(), nil
		}
	case "node":
		if n := w.Cluster.Node(name); n != nil {
			return n.HostNet(), nil
		}
	case "external":
		if h := w.Cluster.ExternalHost(name); h != nil {
			return h.Net(), nil
		}
	}
	return nil, fmt.Errorf("no source %q", from)
}

// DialBudget is how much virtual time a real connection gets before it counts as
// dropped.
const DialBudget = 5 * time.Second

// Dial makes a real connection from a source's network stack (a pod, a node's host
// network, an external host) to dst over TCP or UDP, sends a line and reads the
// built-in whoami server's answer. Unlike a probe it goes through everything a program
// would meet, the userspace proxy's own sockets included.
//
// The world's clock is manual, and Dial moves it without sleeping on wall time: it
// waits until every goroutine of the simulation is blocked (the cluster's Quiesce), and only
// then, with nothing left to happen before a timer fires, advances virtual time to the
// next timer (a retransmission, a proxy's dial timeout, a session expiry). So an answer
// that needs no timer never sees the clock move, however slow the machine, and a lost
// packet costs DialBudget of virtual time and little wall time. srcPort 0 picks an
// ephemeral port.
func (w *World) Dial(from string, proto uint8, dst netip.AddrPort, srcPort uint16) (Dialed, error) {
	n, err := w.netOf(from)
	if err != nil {
		return Dialed{}, err
	}
	network := netsim.ProtoName(proto)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Dialed, 1)
	conns := make(chan net.Conn, 1)
	go func() {
		c, err := n.DialFrom(ctx, network, srcPort, dst.String())
		if err != nil {
			done <- dialFailed(err)
			return
		}
		conns <- c
		defer c.Close()
		if _, err := fmt.Fprintln(c, "proptest"); err != nil {
			done <- dialFailed(err)
			return
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			d := dialFailed(err)
			if errors.Is(err, io.EOF) {
				d = Dialed{Result: ResultClosed, Reason: "accepted, then closed without an answer"}
			}
			done <- d
			return
		}
		who, err := netsim.ParseWhoami(line)
		if err != nil {
			done <- Dialed{Result: netsim.ResultDropped, Reason: "not a whoami answer: " + strings.TrimSpace(line)}
			return
		}
		d := Dialed{Result: netsim.ResultConnected, Pod: who.Pod, Node: who.Node}
		if proto == netfilter.ProtoUDP {
			d.Result = netsim.ResultReplied
		}
		if ap, err := netip.ParseAddrPort(who.Client); err == nil {
			d.Seen = ap.Addr().Unmap()
		}
		done <- d
	}()
	clock := w.Cluster.Clock()
	var conn net.Conn
	var waited time.Duration
	poll := func() (Dialed, bool) {
		for {
			select {
			case d := <-done:
				return d, true
			case conn = <-conns:
			default:
				return Dialed{}, false
			}
		}
	}
	for steps := 0; ; steps++ {
		if d, ok := poll(); ok {
			return d, nil
		}
		w.Cluster.Quiesce()
		if d, ok := poll(); ok {
			return d, nil
		}
		if waited >= DialBudget || steps > 10000 {
			cancel()
			if conn != nil {
				conn.Close()
			}
			// The connection may have been handed over since the last look: close it
			// too, or the reader waits on it for ever.
			for waiting := true; waiting; {
				select {
				case <-done:
					waiting = false
				case c := <-conns:
					c.Close()
				}
			}
			return Dialed{Result: netsim.ResultDropped, Reason: fmt.Sprintf("no answer within %s", DialBudget)}, nil
		}
		step := DialBudget - waited
		if d, ok := clock.NextDeadline(); ok && d < step {
			step = d
		}
		clock.Advance(step)
		waited += step
	}
}

// ResultClosed is a Dial result: the connection was accepted and then closed without an
// answer (the userspace proxy does this when it cannot reach any endpoint).
const ResultClosed = "closed"

func dialFailed(err error) Dialed {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return Dialed{Result: netsim.ResultRefused, Reason: "connection refused"}
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Dialed{Result: netsim.ResultRefused, Reason: "unreachable"}
	case errors.Is(err, context.Canceled), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, net.ErrClosed):
		return Dialed{Result: netsim.ResultDropped, Reason: "no answer"}
	}
	return Dialed{Result: netsim.ResultDropped, Reason: err.Error()}
}
