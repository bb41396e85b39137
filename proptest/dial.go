package proptest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

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

// DialPump is how far the virtual clock moves each time a real connection has waited
// 10 ms of wall time (retransmissions, a proxy's own connection); DialBudget is how much
// virtual time a connection gets before it counts as dropped.
const (
	DialPump   = 250 * time.Millisecond
	DialBudget = 5 * time.Second
)

// Dial makes a real connection from a source's network stack (a pod, a node's host
// network, an external host) to dst over TCP or UDP, sends a line and reads the
// built-in whoami server's answer. Unlike a probe it goes through everything a program
// would meet, the userspace proxy's own sockets included. Virtual time is moved on
// while it waits (the world's clock is manual), so a lost packet costs DialBudget of
// virtual time and little wall time. srcPort 0 picks an ephemeral port.
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
			done <- dialFailed(err)
			return
		}
		who, err := netsim.ParseWhoami(line)
		if err != nil {
			done <- Dialed{Result: netsim.ResultDropped, Reason: "not a whoami answer: " + strings.TrimSpace(line)}
			return
		}
		d := Dialed{Result: netsim.ResultConnected, Pod: who.Pod, Node: who.Node}
		if proto == netsim.ProtoUDP {
			d.Result = netsim.ResultReplied
		}
		if ap, err := netip.ParseAddrPort(who.Client); err == nil {
			d.Seen = ap.Addr().Unmap()
		}
		done <- d
	}()
	var conn net.Conn
	var waited time.Duration
	for {
		select {
		case d := <-done:
			return d, nil
		case conn = <-conns:
			continue
		case <-time.After(10 * time.Millisecond):
		}
		if waited >= DialBudget {
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
		w.Cluster.Clock().Advance(DialPump)
		waited += DialPump
	}
}

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
