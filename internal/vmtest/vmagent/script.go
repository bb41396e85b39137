//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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
	kind  string // ipvsadm, list, conn, sysctl
	cmd   *emulator.Command
	proto string // tcp, udp
	src   netip.AddrPort
	dst   netip.AddrPort
	close bool
	key   string
	val   string
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
		l := line{no: i + 1, text: strings.Join(words, " ")}
		switch words[0] {
		case "conn":
			l.kind = "conn"
			if len(words) < 4 || (words[1] != "tcp" && words[1] != "udp") {
				return nil, fmt.Errorf("line %d: want conn tcp|udp CLIENT:PORT VIP:PORT [close]", l.no)
			}
			l.proto = words[1]
			if l.src, err = netip.ParseAddrPort(words[2]); err != nil {
				return nil, fmt.Errorf("line %d: client: %w", l.no, err)
			}
			if l.dst, err = netip.ParseAddrPort(words[3]); err != nil {
				return nil, fmt.Errorf("line %d: virtual address: %w", l.no, err)
			}
			for _, x := range words[4:] {
				if x != "close" || l.proto != "tcp" {
					return nil, fmt.Errorf("line %d: %q is not supported in the VM (only close, on TCP)", l.no, x)
				}
				l.close = true
			}
		case "sysctl":
			l.kind = "sysctl"
			k, v, ok := strings.Cut(strings.Join(words[1:], ""), "=")
			if !ok {
				return nil, fmt.Errorf("line %d: want sysctl NAME=VALUE", l.no)
			}
			l.key, l.val = strings.TrimPrefix(k, "net.ipv4.vs."), v
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
			// Say who answered, then hold the connection until the client closes it.
			_, _ = io.WriteString(c, id+"\n")
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
		_, _ = pc.WriteTo([]byte(id+"\n"), from)
	}
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

// connect plays a conn line: a real connection from the client address and port to the
// VIP; the first line it reads names the real server. With close the client shuts its
// side down first and waits for the server's FIN, so IPVS has seen the whole close
// (client FIN, server FIN, client ACK) before the next line, as the model plays it.
// Without close the connection stays open (ESTABLISHED) until the case ends.
func connect(n *caseNet, l line, open *[]net.Conn) (dest string, noDest bool, err error) {
	var c net.Conn
	err = inNS(n.cli, func() error {
		var derr error
		switch l.proto {
		case "tcp":
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(l.src), Timeout: ioTimeout}
			c, derr = d.Dial("tcp", l.dst.String())
		case "udp":
			c, derr = net.DialUDP("udp", net.UDPAddrFromAddrPort(l.src), net.UDPAddrFromAddrPort(l.dst))
		}
		return derr
	})
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return "", true, err
		}
		return "", false, err
	}
	*open = append(*open, c)
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	if l.proto == "udp" {
		if _, err := c.Write([]byte("which\n")); err != nil {
			return "", errors.Is(err, syscall.ECONNREFUSED), err
		}
	}
	id, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", errors.Is(err, syscall.ECONNREFUSED), err
	}
	if l.close {
		tc := c.(*net.TCPConn)
		if err := tc.CloseWrite(); err != nil {
			return "", false, err
		}
		if _, err := io.Copy(io.Discard, tc); err != nil {
			return "", false, fmt.Errorf("waiting for the server's FIN: %w", err)
		}
		tc.Close()
	}
	return strings.TrimSpace(id), false, nil
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
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
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
			conns, err := connTable(n)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", l.no, err)
			}
			r.Conns, r.ConnsListed = conns, true
		case "sysctl":
			if err := n.sysctl(n.dir, "net/ipv4/vs/"+l.key, l.val); err != nil {
				return nil, fmt.Errorf("line %d: %w", l.no, err)
			}
		case "conn":
			dest, noDest, err := connect(n, l, &open)
			r.Destination, r.NoDestination = dest, noDest
			if err != nil {
				r.Err = err.Error()
			}
		}
		emit(vmtest.ResultPrefix, r)
	}
	return nil, nil
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
// ipvsadm decodes them, the expiry left out (the kernel's clock is not the model's).
func connTable(n *caseNet) ([]string, error) {
	var b []byte
	err := inNS(n.dir, func() error {
		var rerr error
		b, rerr = os.ReadFile("/proc/thread-self/net/ip_vs_conn")
		return rerr
	})
	if err != nil {
		return nil, err
	}
	out := []string{}
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
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("ip_vs_conn line %q: %w", l, err)
		}
		out = append(out, strings.Join([]string{f[0], f[7], src, vip, dst}, " "))
	}
	slices.Sort(out)
	return out, nil
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
