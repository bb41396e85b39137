package proptest

import (
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

	"github.com/clusterlab/clusterlab/netsim"
	"github.com/clusterlab/clusterlab/scenario"
)

// Dialed is what a real connection saw: the whoami server's answer (which pod, which
// source address it saw), or why there was none. Its Result is ResultClosed when the
// connection was accepted and closed without an answer.
type Dialed = scenario.Dialed

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
// built-in whoami server's answer (scenario.DialWhoami). Unlike a probe it goes through
// everything a program would meet, the userspace proxy's own sockets included.
//
// The world's clock is manual, and Dial moves it without sleeping on wall time, as
// DialWhoami says: it advances virtual time only once the simulation has settled, so a
// lost packet costs DialBudget of virtual time and little wall time. srcPort 0 picks an
// ephemeral port.
func (w *World) Dial(from string, proto uint8, dst netip.AddrPort, srcPort uint16) (Dialed, error) {
	n, err := w.netOf(from)
	if err != nil {
		return Dialed{}, err
	}
	return scenario.DialWhoami(context.Background(), w.Cluster, scenario.WhoamiDial{
		Net: n, Network: netsim.ProtoName(proto), SrcPort: srcPort, Dst: dst, Line: "proptest", Budget: DialBudget,
		Failed: func(err error) Dialed {
			// Only the read can end in EOF: the server took the connection and closed it.
			if errors.Is(err, io.EOF) {
				return Dialed{Result: ResultClosed, Reason: "accepted, then closed without an answer"}
			}
			return dialFailed(err)
		},
	}), nil
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
