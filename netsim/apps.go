package netsim

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/clusterlab/clusterlab/netfilter"
)

// Whoami is what the built-in server answers: who served the request and what it saw.
type Whoami struct {
	Pod    string // namespace/name ("" for a node's host network)
	Node   string
	Client string // the source address:port the server saw
	Local  string // the address:port the server was reached on
	Msg    string // the request line (echo) or the HTTP path
}

// String renders the one-line reply: pod=ns/name node=n client=ip:port local=ip:port msg=...
func (w Whoami) String() string {
	return fmt.Sprintf("pod=%s node=%s client=%s local=%s msg=%s", w.Pod, w.Node, w.Client, w.Local, w.Msg)
}

// ParseWhoami parses a reply of the built-in server (one line, or an HTTP body).
func ParseWhoami(s string) (Whoami, error) {
	s = strings.TrimRight(s, "\r\n")
	var w Whoami
	fields := map[string]*string{"pod": &w.Pod, "node": &w.Node, "client": &w.Client, "local": &w.Local}
	rest := s
	for _, key := range []string{"pod", "node", "client", "local"} {
		prefix := key + "="
		if !strings.HasPrefix(rest, prefix) {
			return Whoami{}, fmt.Errorf("not a whoami reply (want %q): %q", prefix, s)
		}
		rest = rest[len(prefix):]
		sp := strings.IndexByte(rest, ' ')
		if sp < 0 {
			return Whoami{}, fmt.Errorf("truncated whoami reply: %q", s)
		}
		*fields[key] = rest[:sp]
		rest = rest[sp+1:]
	}
	if !strings.HasPrefix(rest, "msg=") {
		return Whoami{}, fmt.Errorf("not a whoami reply (want msg=): %q", s)
	}
	w.Msg = rest[len("msg="):]
	return w, nil
}

// ServeWhoami runs the built-in server on a network: on TCP it answers HTTP requests
// (status 200, the whoami line as the body, headers X-Pod, X-Node, X-Client) and, for any
// other first line, echoes each line prefixed with who served it; on UDP it answers each
// datagram the same way. It returns a function that stops the server.
func ServeWhoami(n *Net, pod, node string, proto uint8, port uint16) (stop func(), err error) {
	switch proto {
	case netfilter.ProtoTCP:
		ln, err := n.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return nil, err
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go serveWhoamiConn(c, pod, node)
			}
		}()
		return func() { ln.Close() }, nil
	case netfilter.ProtoUDP:
		// One socket per family the network has (netstack's UDP sockets are per family).
		var stops []func()
		for _, network := range n.udpNetworks() {
			pc, err := n.ListenPacket(network, fmt.Sprintf(":%d", port))
			if err != nil {
				for _, s := range stops {
					s()
				}
				return nil, err
			}
			go serveWhoamiUDP(pc, pod, node, port)
			stops = append(stops, func() { pc.Close() })
		}
		return func() {
			for _, s := range stops {
				s()
			}
		}, nil
	}
	return nil, fmt.Errorf("the built-in server speaks tcp and udp, not %s", ProtoName(proto))
}

func serveWhoamiConn(c net.Conn, pod, node string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil && line == "" {
		return
	}
	who := func(msg string) Whoami {
		return Whoami{Pod: pod, Node: node, Client: c.RemoteAddr().String(), Local: c.LocalAddr().String(), Msg: msg}
	}
	if isHTTPRequestLine(line) {
		req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(line), r)))
		if err != nil {
			return
		}
		w := who(req.URL.Path)
		body := w.String() + "\n"
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nX-Pod: %s\r\nX-Node: %s\r\nX-Client: %s\r\nConnection: close\r\n\r\n%s", len(body), pod, node, w.Client, body)
		return
	}
	for {
		if _, err := fmt.Fprintln(c, who(strings.TrimRight(line, "\r\n")).String()); err != nil {
			return
		}
		line, err = r.ReadString('\n')
		if err != nil && line == "" {
			return
		}
	}
}

func isHTTPRequestLine(l string) bool {
	l = strings.TrimRight(l, "\r\n")
	parts := strings.Fields(l)
	return len(parts) == 3 && strings.HasPrefix(parts[2], "HTTP/1.") && strings.ToUpper(parts[0]) == parts[0]
}

// Serve runs the built-in whoami server on the pod (see ServeWhoami); it stops when the
// pod dies.
func (p *Pod) Serve(proto uint8, port uint16) error {
	_, err := p.ServeStoppable(proto, port)
	return err
}

// ServeStoppable is Serve, and returns a function that stops the server before the pod
// dies (a container that exits while the pod lives on: its port is closed, connections
// to it are refused). Calling it more than once is harmless.
func (p *Pod) ServeStoppable(proto uint8, port uint16) (stop func(), err error) {
	var stopServer func()
	p.cluster.labeled(func() { stopServer, err = ServeWhoami(p.Net(), p.key(), p.node.name, proto, port) })
	if err != nil {
		return nil, fmt.Errorf("pod %s: serve %s/%d: %w", p.key(), ProtoName(proto), port, err)
	}
	var once sync.Once
	stopOnce := func() { once.Do(stopServer) }
	p.OnKill(stopOnce)
	return stopOnce, nil
}

func serveWhoamiUDP(pc net.PacketConn, pod, node string, port uint16) {
	buf := make([]byte, 65536)
	for {
		k, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		w := Whoami{Pod: pod, Node: node, Client: from.String(), Local: fmt.Sprintf(":%d", port), Msg: strings.TrimRight(string(buf[:k]), "\r\n")}
		if la := pc.LocalAddr(); la != nil {
			w.Local = la.String()
		}
		pc.WriteTo([]byte(w.String()+"\n"), from)
	}
}
