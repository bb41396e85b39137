//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	libipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/clusterlab/clusterlab/internal/vmtest"
	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/proxy/ipvs"
	"github.com/clusterlab/clusterlab/proxy/ipvs/emulator"
)

// A script's lines as the agent runs them: the subset of the emulator's script grammar
// that a real kernel can be driven by from outside. Anything else is refused by line.
type line struct {
	no    int
	text  string
	kind  string // ipvsadm, list, conns, stats, conn, sysctl, sleep
	cmd   *emulator.Command
	proto string // tcp, udp
	src   netip.AddrPort
	dst   netip.AddrPort
	close bool
	// serverClose: the real server closes first, the client keeps its side open
	serverClose bool
	key         string
	val         string
	dur         time.Duration // sleep: really waited in the guest
}

func parseLines(script string) ([]line, error) {
	var out []line
	for i, raw := range strings.Split(script, "\n") {
		t := strings.TrimSpace(raw)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		words, err := emulator.SplitArgs(t)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		for j, w := range words {
			if strings.HasPrefix(w, "#") {
				words = words[:j]
				break
			}
		}
		if len(words) == 0 { // a quoted "#..." word: a comment, as the emulator reads it
			continue
		}
		l := line{no: i + 1, text: strings.Join(words, " ")}
		switch words[0] {
		case "conn":
			l.kind = "conn"
			if len(words) < 4 || (words[1] != "tcp" && words[1] != "udp") {
				return nil, fmt.Errorf("line %d: want conn tcp|udp CLIENT:PORT VIP:PORT [close|server-close]", l.no)
			}
			l.proto = words[1]
			if l.src, err = netip.ParseAddrPort(words[2]); err != nil {
				return nil, fmt.Errorf("line %d: client: %w", l.no, err)
			}
			if l.dst, err = netip.ParseAddrPort(words[3]); err != nil {
				return nil, fmt.Errorf("line %d: virtual address: %w", l.no, err)
			}
			for _, x := range words[4:] {
				switch {
				case x == "close" && l.proto == "tcp" && !l.serverClose:
					l.close = true
				case x == "server-close" && l.proto == "tcp" && !l.close:
					l.serverClose = true
				default:
					return nil, fmt.Errorf("line %d: %q is not supported in the VM (only close or server-close, on TCP)", l.no, x)
				}
			}
		case "sysctl":
			l.kind = "sysctl"
			k, v, ok := strings.Cut(strings.Join(words[1:], ""), "=")
			if !ok {
				return nil, fmt.Errorf("line %d: want sysctl NAME=VALUE", l.no)
			}
			l.key, l.val = strings.TrimPrefix(k, "net.ipv4.vs."), v
		case "sleep", "advance":
			// The model advances its virtual clock by as much; the guest really waits.
			l.kind = "sleep"
			var f float64
			if len(words) == 2 {
				f, err = strconv.ParseFloat(words[1], 64)
			}
			if len(words) != 2 || err != nil || f < 0 || f > 60 {
				return nil, fmt.Errorf("line %d: want sleep SECONDS (0 to 60, a number)", l.no)
			}
			l.dur = time.Duration(f * float64(time.Second))
		default:
			if words[0] != "ipvsadm" && !strings.HasPrefix(words[0], "-") {
				return nil, fmt.Errorf("line %d: %q is not supported in the VM (ipvsadm commands, conn, sysctl)", l.no, words[0])
			}
			c, err := emulator.ParseCommand(words)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", l.no, err)
			}
			l.kind, l.cmd = "ipvsadm", c
			switch {
			case c.ListsConnections():
				l.kind = "conns"
			case c.ListsStats():
				l.kind = "stats"
			case c.Op == emulator.OpList:
				l.kind = "list"
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// topologyOf collects the addresses the script needs: clients and VIPs from conn lines
// and services, real servers (with their ports) from -a and -e lines.
func topologyOf(lines []line) (topology, []endpoint) {
	var t topology
	var eps []endpoint
	add := func(s *[]netip.Addr, a netip.Addr) {
		if !slices.Contains(*s, a) {
			*s = append(*s, a)
		}
	}
	for _, l := range lines {
		switch l.kind {
		case "conn":
			add(&t.clients, l.src.Addr())
			add(&t.vips, l.dst.Addr())
		case "ipvsadm":
			vs := l.cmd.VirtualServer()
			if vs != nil && vs.FWMark == 0 {
				add(&t.vips, vs.Address)
			}
			if rs := l.cmd.RealServer(); rs != nil && vs != nil && vs.FWMark == 0 {
				add(&t.servers, rs.Address)
				e := endpoint{proto: strings.ToLower(vs.Protocol), addr: netip.AddrPortFrom(rs.Address, rs.Port)}
				if !slices.Contains(eps, e) {
					eps = append(eps, e)
				}
			}
		}
	}
	return t, eps
}

type endpoint struct {
	proto string
	addr  netip.AddrPort
}

// servers are the real servers' listeners: each answers with its own address, so the
// client learns which real server IPVS picked.
type servers struct {
	wg      sync.WaitGroup
	closers []io.Closer
	mu      sync.Mutex
	conns   []net.Conn
}

func (s *servers) start(n *caseNet, eps []endpoint) error {
	for _, e := range eps {
		e := e
		err := inNS(n.srv, func() error {
			switch e.proto {
			case "tcp":
				ln, err := net.Listen("tcp", e.addr.String())
				if err != nil {
					return err
				}
				s.closers = append(s.closers, ln)
				s.wg.Add(1)
				go s.serveTCP(ln, e.addr.String())
			case "udp":
				pc, err := net.ListenPacket("udp", e.addr.String())
				if err != nil {
					return err
				}
				s.closers = append(s.closers, pc)
				s.wg.Add(1)
				go s.serveUDP(pc, e.addr.String())
			default:
				return fmt.Errorf("protocol %s", e.proto)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("real server %s %s: %w", e.proto, e.addr, err)
		}
	}
	return nil
}

func (s *servers) serveTCP(ln net.Listener, id string) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		go func() {
			// Read the request, answer who answered; then, for a "close" request,
			// close this side first (the client keeps its own open); otherwise hold
			// the connection until the client closes it.
			req := make([]byte, emulator.ConnPayload)
			if _, err := io.ReadFull(c, req); err == nil {
				_, _ = c.Write(reply(id))
				if strings.HasPrefix(string(req), "close") {
					_ = c.(*net.TCPConn).CloseWrite()
				}
			}
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}()
	}
}

func (s *servers) serveUDP(pc net.PacketConn, id string) {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo(reply(id), from)
	}
}

// request and reply are a conn line's traffic: emulator.ConnPayload bytes each way, so
// that the kernel's byte counters (-L --stats) are fixed by the script.
func request(verb string) []byte { return pad(verb + "\n") }

func reply(id string) []byte { return pad(id + "\n") }

func pad(s string) []byte {
	b := []byte(strings.Repeat(".", emulator.ConnPayload))
	copy(b, s)
	return b
}

func (s *servers) stop() {
	for _, c := range s.closers {
		c.Close()
	}
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

const ioTimeout = 20 * time.Second

// dialTimeout: a local handshake takes milliseconds even under emulation; a SYN that
// IPVS drops is retransmitted after 1 s and 3 s, and the line then counts as dropped.
const dialTimeout = 5 * time.Second

type tuple struct {
	proto    string
	src, dst netip.AddrPort
}

// openConn is a connection a conn line left open: a later conn line on its tuple
// closes it (TCP, with close) or sends on it again (UDP).
type openConn struct {
	c    net.Conn
	dest string
}

// connect plays a conn line: a real connection from the client address and port to the
// VIP that sends a request and reads the reply naming the real server (ConnPayload
// bytes each way). With close the client shuts its side down first and waits for the
// server's FIN, so IPVS has seen the whole close (client FIN, server FIN, client ACK)
// before the next line, as the model plays it; with server-close the server closes
// first and the client keeps its side open (the entry waits in FIN_WAIT). Otherwise the
// connection stays open until the case ends or a later line on its tuple: close then
// closes it (the real server that answers is the one it had), and a UDP line sends
// another datagram on the same socket.
func connect(n *caseNet, l line, open map[tuple]*openConn) (dest string, noDest bool, err error) {
	t := tuple{l.proto, l.src, l.dst}
	if o := open[t]; o != nil {
		switch {
		case l.proto == "udp":
			return exchange(o.c, "which")
		case l.close:
			delete(open, t)
			return o.dest, false, closeTCP(o.c.(*net.TCPConn))
		}
		return "", false, fmt.Errorf("%s %s -> %s is still open: only close can follow it in the VM", l.proto, l.src, l.dst)
	}
	var c net.Conn
	err = inNS(n.cli, func() error {
		var derr error
		switch l.proto {
		case "tcp":
			// SO_REUSEADDR, and tcp_tw_reuse in the client namespace, let a later line
			// reuse a client port whose last connection the client closed (its socket
			// in TIME_WAIT), as the model's reused-tuple lines do. No keepalives: the
			// model sends none.
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(l.src), Timeout: dialTimeout, KeepAlive: -1,
				Control: func(_, _ string, rc syscall.RawConn) error {
					var serr error
					if err := rc.Control(func(fd uintptr) {
						serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
					}); err != nil {
						return err
					}
					return serr
				}}
			c, derr = d.Dial("tcp", l.dst.String())
		case "udp":
			c, derr = net.DialUDP("udp", net.UDPAddrFromAddrPort(l.src), net.UDPAddrFromAddrPort(l.dst))
		}
		return derr
	})
	if err != nil {
		// Refused: IPVS had no destination (ICMP port unreachable). Timed out: IPVS
		// dropped the SYN and its retransmissions (the model's drop verdict).
		var ne net.Error
		if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &ne) && ne.Timeout() {
			return "", true, err
		}
		return "", false, err
	}
	verb := "which"
	if l.serverClose {
		verb = "close"
	}
	dest, noDest, err = exchange(c, verb)
	if err != nil {
		c.Close()
		return dest, noDest, err
	}
	if l.close {
		return dest, false, closeTCP(c.(*net.TCPConn))
	}
	if l.serverClose {
		// wait for the server's FIN (EOF) so that IPVS has seen it and the client's ACK
		if _, err := io.Copy(io.Discard, c); err != nil {
			c.Close()
			return dest, false, fmt.Errorf("waiting for the server's FIN: %w", err)
		}
	}
	open[t] = &openConn{c: c, dest: dest}
	return dest, false, nil
}

// exchange sends a request and reads the reply, which names the real server.
func exchange(c net.Conn, verb string) (dest string, noDest bool, err error) {
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write(request(verb)); err != nil {
		return "", errors.Is(err, syscall.ECONNREFUSED), err
	}
	b := make([]byte, emulator.ConnPayload)
	if _, err := io.ReadFull(c, b); err != nil {
		return "", errors.Is(err, syscall.ECONNREFUSED), err
	}
	id, _, _ := strings.Cut(string(b), "\n")
	return id, false, nil
}

// closeTCP shuts the client's side and waits for the server's FIN.
func closeTCP(tc *net.TCPConn) error {
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(ioTimeout))
	if err := tc.CloseWrite(); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tc); err != nil {
		return fmt.Errorf("waiting for the server's FIN: %w", err)
	}
	return nil
}

func runScript(idx int, c vmtest.Case) (leftover []string, err error) {
	lines, err := parseLines(c.Script)
	if err != nil {
		return nil, err
	}
	topo, eps := topologyOf(lines)
	n, err := buildNet(idx, topo)
	if err != nil {
		return nil, err
	}
	var srv servers
	open := map[tuple]*openConn{}
	defer func() {
		for _, o := range open {
			o.c.Close()
		}
		srv.stop()
		if cerr := n.close(); cerr != nil {
			leftover = append(leftover, cerr.Error())
		}
	}()
	if err := srv.start(n, eps); err != nil {
		return nil, err
	}
	v, err := kernel.NewIPVS(n.dirName)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	begin := time.Now()
	for step, l := range lines {
		r := vmtest.Result{Case: c.Name, Step: step, Line: l.no, Text: l.text}
		switch l.kind {
		case "ipvsadm":
			if err := l.cmd.ApplyTo(v); err != nil {
				r.ErrClass, r.Err = vmtest.ErrClass(err), err.Error()
			}
		case "list":
			lst, err := vmtest.Listing(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: listing: %w", l.no, err)
			}
			r.Listing, r.Listed = lst, true
		case "conns":
			conns, exp, err := connTable(n)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", l.no, err)
			}
			r.Conns, r.ConnExpires, r.ConnsListed = conns, exp, true
		case "stats":
			st, err := trafficStats(n)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", l.no, err)
			}
			r.Stats, r.StatsListed = st, true
		case "sysctl":
			if err := n.sysctl(n.dir, "net/ipv4/vs/"+l.key, l.val); err != nil {
				return nil, fmt.Errorf("line %d: %w", l.no, err)
			}
		case "sleep":
			time.Sleep(l.dur)
		case "conn":
			dest, noDest, err := connect(n, l, open)
			r.Destination, r.NoDestination = dest, noDest
			if err != nil {
				r.Err = err.Error()
			}
		}
		r.AtMS = time.Since(begin).Milliseconds()
		emit(vmtest.ResultPrefix, r)
	}
	return nil, nil
}

// trafficStats reads the director's IPVS traffic counters (ipvsadm -Ln --stats) over
// generic netlink: the adapter's ipvs.Interface has no statistics, so moby/ipvs, the
// adapter's own library, is asked directly. Services come sorted by their label, real
// servers in kernel list order.
func trafficStats(n *caseNet) ([]vmtest.ServiceStats, error) {
	h, err := libipvs.New(filepath.Join("/run/netns", n.dirName))
	if err != nil {
		return nil, err
	}
	defer h.Close()
	svcs, err := h.GetServices()
	if err != nil {
		return nil, err
	}
	conv := func(s libipvs.SvcStats) vmtest.TrafficStats {
		return vmtest.TrafficStats{Conns: uint64(s.Connections), InPkts: uint64(s.PacketsIn), OutPkts: uint64(s.PacketsOut),
			InBytes: s.BytesIn, OutBytes: s.BytesOut}
	}
	out := []vmtest.ServiceStats{}
	for _, svc := range svcs {
		var label string
		if svc.FWMark != 0 {
			label = fmt.Sprintf("FWM %d", svc.FWMark)
			if svc.AddressFamily == unix.AF_INET6 {
				label += " IPv6"
			}
		} else {
			a, _ := netip.AddrFromSlice(svc.Address)
			label = map[uint16]string{unix.IPPROTO_TCP: "TCP", unix.IPPROTO_UDP: "UDP", unix.IPPROTO_SCTP: "SCTP"}[svc.Protocol] +
				" " + netip.AddrPortFrom(a.Unmap(), svc.Port).String()
		}
		ss := vmtest.ServiceStats{Service: label, Stats: conv(svc.Stats), Destinations: []vmtest.DestStats{}}
		dests, err := h.GetDestinations(svc)
		if err != nil {
			return nil, err
		}
		for _, d := range dests {
			a, _ := netip.AddrFromSlice(d.Address)
			ss.Destinations = append(ss.Destinations, vmtest.DestStats{Destination: netip.AddrPortFrom(a.Unmap(), d.Port).String(),
				Stats: conv(libipvs.SvcStats(d.Stats))})
		}
		out = append(out, ss)
	}
	slices.SortFunc(out, func(a, b vmtest.ServiceStats) int { return strings.Compare(a.Service, b.Service) })
	return out, nil
}

// runCalls makes the case's ipvs.Interface calls on the kernel adapter in a namespace
// of their own and lists the state after each; whatever is still there at the end is
// reported as left behind.
func runCalls(idx int, c vmtest.Case) (leftover []string, err error) {
	n, err := newDirector(fmt.Sprintf("calls%d", idx))
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := n.close(); cerr != nil {
			leftover = append(leftover, cerr.Error())
		}
	}()
	v, err := kernel.NewIPVS(n.dirName)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	var iface ipvs.Interface = v
	for step, call := range c.Calls {
		r := vmtest.Result{Case: c.Name, Step: step, Text: call.String()}
		if err := call.Do(iface); err != nil {
			r.ErrClass, r.Err = vmtest.ErrClass(err), err.Error()
		}
		lst, err := vmtest.Listing(iface)
		if err != nil {
			return nil, fmt.Errorf("call %d: listing: %w", step, err)
		}
		r.Listing, r.Listed = lst, true
		emit(vmtest.ResultPrefix, r)
	}
	lst, err := vmtest.Listing(iface)
	if err != nil {
		return nil, err
	}
	for _, s := range lst {
		leftover = append(leftover, fmt.Sprintf("virtual server %+v with %d real servers", s.VS, len(s.Destinations)))
	}
	return leftover, nil
}

// connTable reads the director's /proc/net/ip_vs_conn (what ipvsadm -Lnc prints) into
// "PROTO STATE CLIENT VIRTUAL DESTINATION" lines, sorted: hex addresses and ports as
// ipvsadm decodes them, the expiry apart (the kernel's clock is not the model's: the
// host compares it loosely), in the lines' order.
func connTable(n *caseNet) ([]string, []int, error) {
	var b []byte
	err := inNS(n.dir, func() error {
		var rerr error
		b, rerr = os.ReadFile("/proc/thread-self/net/ip_vs_conn")
		return rerr
	})
	if err != nil {
		return nil, nil, err
	}
	type entry struct {
		line string
		exp  int
	}
	var es []entry
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if i == 0 || len(f) < 9 {
			continue // the header
		}
		ap := func(addr, port string) (string, error) {
			a, err := hexAddr(addr)
			if err != nil {
				return "", err
			}
			p, err := strconv.ParseUint(port, 16, 16)
			if err != nil {
				return "", err
			}
			return netip.AddrPortFrom(a, uint16(p)).String(), nil
		}
		src, err1 := ap(f[1], f[2])
		vip, err2 := ap(f[3], f[4])
		dst, err3 := ap(f[5], f[6])
		exp, err4 := strconv.Atoi(f[8])
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, nil, fmt.Errorf("ip_vs_conn line %q: %w", l, err)
		}
		es = append(es, entry{strings.Join([]string{f[0], f[7], src, vip, dst}, " "), exp})
	}
	slices.SortStableFunc(es, func(a, b entry) int { return strings.Compare(a.line, b.line) })
	out, exps := []string{}, []int{}
	for _, e := range es {
		out, exps = append(out, e.line), append(exps, e.exp)
	}
	return out, exps, nil
}

// hexAddr decodes /proc/net/ip_vs_conn's addresses: 8 hex digits for IPv4, the
// colon-separated IPv6 form otherwise.
func hexAddr(s string) (netip.Addr, error) {
	if len(s) == 8 {
		v, err := strconv.ParseUint(s, 16, 32)
		if err != nil {
			return netip.Addr{}, err
		}
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
	}
	return netip.ParseAddr(s)
}
