package scenario

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/netsim"
)

// Dialed is what one real connection to the built-in whoami server saw: which pod (or
// node) answered and the source address it saw, or why nothing answered.
type Dialed struct {
	// Result is netsim.ResultConnected (TCP) or ResultReplied (UDP) when a server
	// answered; otherwise what WhoamiDial.Failed made of the error, or ResultDropped
	// (no answer within the budget, or an answer that was not the whoami server's).
	Result string
	// Pod is the pod that answered ("" for a node's host network).
	Pod, Node string
	// Seen is the source address the server saw.
	Seen netip.Addr
	// Reason says why nothing answered.
	Reason string
	// Status and Body are an HTTP answer's (WhoamiDial.Exchange with HTTPExchange).
	Status int
	Body   string
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

// WhoamiDial says how DialWhoami connects.
type WhoamiDial struct {
	// Net is the network stack that dials: a pod's, a node's host network or an
	// external host's.
	Net     *netsim.Net
	Network string // "tcp" or "udp"
	SrcPort uint16 // 0 picks an ephemeral port
	Dst     netip.AddrPort
	// Line is the line sent; the server echoes it after its answer.
	Line string
	// Budget is the virtual time the connection gets before it counts as dropped.
	Budget time.Duration
	// QuickWait is how long, in wall time, to wait for the answer before each look at
	// the simulation's goroutines (which costs more); it saves work and never moves
	// the virtual clock. With 0 DialWhoami looks at once, so it returns only once the
	// simulation has settled, unless the answer was there before the first look.
	QuickWait time.Duration
	// Failed turns an error of the dial, of the write or of the read into a result and
	// a reason; nil makes every error ResultDropped with the error's text.
	Failed func(error) Dialed
	// Exchange, when set, talks on the connection instead of sending Line and reading
	// the whoami answer (HTTPExchange: an HTTP GET); its error goes to Failed.
	Exchange func(conn net.Conn) (Dialed, error)
}

// DialWhoami makes a real connection from d.Net to d.Dst, sends d.Line and reads the
// built-in whoami server's answer (netsim.ServeWhoami). Unlike a probe it goes through
// everything a program would meet, the userspace proxy's own sockets included.
//
// The cluster's clock must be manual: DialWhoami moves it without sleeping on wall
// time. It waits until every goroutine of the cluster is blocked (c.Quiesce: other
// clusters in the process do not hold it up) and only
// then, with nothing left to happen before a timer fires, advances virtual time to the
// next timer (a retransmission, a proxy's dial timeout, a session expiry). So an answer
// that needs no timer never sees the clock move, however slow or loaded the machine,
// and a lost packet costs d.Budget of virtual time and little wall time. When ctx is
// done DialWhoami gives up as when the budget runs out.
func DialWhoami(ctx context.Context, c *cluster.Cluster, d WhoamiDial) Dialed {
	fail := d.Failed
	if fail == nil {
		fail = func(err error) Dialed { return Dialed{Result: netsim.ResultDropped, Reason: err.Error()} }
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan Dialed, 1)
	conns := make(chan net.Conn, 1)
	// The dialing goroutine is busy (the clock must not move) except while it waits on
	// the network: a TCP handshake, the answer, an exchange. A UDP dial and the line's
	// write do not wait, so the datagram has left before the clock can move.
	gate := netsim.NewGate()
	gate.Add(1)
	go func() {
		defer gate.Add(-1)
		blocking := func(f func()) {
			gate.Add(-1)
			f()
			gate.Add(1)
		}
		var conn net.Conn
		var err error
		dial := func() { conn, err = d.Net.DialFrom(actx, d.Network, d.SrcPort, d.Dst.String()) }
		if d.Network == "udp" {
			dial()
		} else {
			blocking(dial)
		}
		if err != nil {
			done <- fail(err)
			return
		}
		conns <- conn
		defer conn.Close()
		if d.Exchange != nil {
			var a Dialed
			blocking(func() { a, err = d.Exchange(conn) })
			if err != nil {
				a = fail(err)
			}
			done <- a
			return
		}
		if _, err := fmt.Fprintln(conn, d.Line); err != nil {
			done <- fail(err)
			return
		}
		var line string
		blocking(func() { line, err = bufio.NewReader(conn).ReadString('\n') })
		if err != nil {
			done <- fail(err)
			return
		}
		done <- whoamiAnswer(d.Network, line)
	}()
	var conn net.Conn
	poll := func() (Dialed, bool) {
		for {
			select {
			case a := <-done:
				return a, true
			case conn = <-conns:
			default:
				return Dialed{}, false
			}
		}
	}
	clock := c.Clock()
	var waited time.Duration
	for steps := 0; ; steps++ {
		if a, ok := poll(); ok {
			return a
		}
		if d.QuickWait > 0 {
			select {
			case a := <-done:
				return a
			case <-time.After(d.QuickWait):
			}
		}
		idle, wake, gen := gate.State()
		if !idle {
			select {
			case a := <-done:
				return a
			case <-wake:
			}
			continue
		}
		c.Quiesce()
		if a, ok := poll(); ok {
			return a
		}
		if now, _, g := gate.State(); !now || g != gen {
			continue // the dialer woke while the simulation settled
		}
		if waited >= d.Budget || steps > 10000 || ctx.Err() != nil {
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
			return Dialed{Result: netsim.ResultDropped, Reason: fmt.Sprintf("no answer within %s", d.Budget)}
		}
		step := d.Budget - waited
		if next, ok := clock.NextDeadline(); ok && next < step {
			step = next
		}
		clock.Advance(step)
		waited += step
	}
}

// whoamiAnswer reads the whoami server's answer line: who answered and the client
// address it saw.
func whoamiAnswer(network, line string) Dialed {
	w, err := netsim.ParseWhoami(line)
	if err != nil {
		return Dialed{Result: netsim.ResultDropped, Reason: "not a whoami answer: " + strings.TrimSpace(line)}
	}
	d := Dialed{Result: netsim.ResultConnected, Pod: w.Pod, Node: w.Node}
	if network == "udp" {
		d.Result = netsim.ResultReplied
	}
	if ap, err := netip.ParseAddrPort(w.Client); err == nil {
		d.Seen = ap.Addr().Unmap()
	}
	return d
}

// HTTPExchange returns a WhoamiDial.Exchange that sends an HTTP/1.1 GET of path (with
// a Host header of host, or of the destination) and reads the answer: its status and
// body (up to 64 KiB). The built-in whoami server's X-Pod, X-Node and X-Client headers
// say who answered and the source it saw; other servers (kube-proxy's health servers)
// answer without them.
func HTTPExchange(path, host string, dst netip.AddrPort) func(net.Conn) (Dialed, error) {
	if host == "" {
		host = dst.String()
	}
	return func(conn net.Conn) (Dialed, error) {
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: clusterlab\r\nAccept: */*\r\nConnection: close\r\n\r\n", path, host); err != nil {
			return Dialed{}, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return Dialed{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return Dialed{}, err
		}
		d := Dialed{Result: netsim.ResultConnected, Status: resp.StatusCode, Body: string(body), Pod: resp.Header.Get("X-Pod"), Node: resp.Header.Get("X-Node")}
		if ap, err := netip.ParseAddrPort(resp.Header.Get("X-Client")); err == nil {
			d.Seen = ap.Addr().Unmap()
		}
		return d, nil
	}
}
